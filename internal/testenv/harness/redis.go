package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig describes a private redis-server.
type RedisConfig struct {
	Path string // the redis-server binary
	Dir  string // its working directory (--dir)
	// Args come before the defaults (port, loopback, no persistence, Dir):
	// a configuration file, --sentinel, --cluster-enabled yes,
	// --replicaof..., --logfile...
	Args []string
	// Password, when set, is the server's requirepass; Client and
	// sentinels of the server use it.
	Password string
	// ClusterBus, for a node of a cluster (--cluster-enabled yes in Args),
	// gives it a cluster bus port of its own (--cluster-port), chosen with
	// its port: the default, the port + 10000, may be taken.
	ClusterBus bool
}

// RedisServer is a redis-server of the caller's own on a free loopback
// port, which it may stop (like a crash) and start again on the same port.
type RedisServer struct {
	// Port is the server's. A first start that finds it taken (by another
	// process since FreePort chose it) moves the server to another port:
	// read Port, Addr, URL and Client once Start has returned.
	Port int
	Out  *Output // what every start of the server wrote
	// Client reaches DB 0 of the server (or the sentinel) with a short dial
	// timeout and no retries; a context's deadline bounds its commands.
	Client  *redis.Client
	cfg     RedisConfig
	busPort int // the cluster bus port, with cfg.ClusterBus
	proc    *Process
	started bool // it has answered once: its clients know its port
}

// NewRedisServer picks the server's port and makes its client; Start
// starts it.
func NewRedisServer(cfg RedisConfig) (*RedisServer, error) {
	if cfg.Path == "" || cfg.Dir == "" {
		return nil, errors.New("redis-server: a binary and a directory are required")
	}
	r := &RedisServer{Out: new(Output), cfg: cfg}
	if err := r.choosePorts(); err != nil {
		return nil, err
	}
	return r, nil
}

// choosePorts gives the server free ports and a client of the new port.
func (r *RedisServer) choosePorts() error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	if r.cfg.ClusterBus {
		if r.busPort, err = FreePort(); err != nil {
			return err
		}
	}
	if r.Client != nil {
		_ = r.Client.Close()
	}
	r.Port = port
	r.Client = redis.NewClient(&redis.Options{Addr: r.Addr(), Password: r.cfg.Password,
		DialTimeout: 250 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	return nil
}

// StartRedisServer is NewRedisServer and Start; on an error nothing is left
// running.
func StartRedisServer(cfg RedisConfig) (*RedisServer, error) {
	r, err := NewRedisServer(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// Addr is the server's host:port.
func (r *RedisServer) Addr() string { return Loopback(r.Port) }

// URL is a REDIS_URL of DB 0 of the server, with its password.
func (r *RedisServer) URL() string {
	if r.cfg.Password != "" {
		return "redis://:" + r.cfg.Password + "@" + r.Addr() + "/0"
	}
	return "redis://" + r.Addr() + "/0"
}

// Running reports whether the server has been started and not stopped.
func (r *RedisServer) Running() bool { return r.proc != nil }

// Process is the running server, or nil.
func (r *RedisServer) Process() *Process { return r.proc }

// Start runs redis-server on the server's port and waits (at most 10 s)
// until it answers INFO as itself. It first waits for the port to listen, so that the
// client logs no refused dial.
//
// At the first start, a port taken by another process since it was chosen
// (redis-server exits with "Address already in use") is replaced by another
// free one, up to PortTries ports in all. A restart keeps the port: the
// server's clients, its replicas and sentinels look for it there, and it
// takes back the port it held until it was stopped.
func (r *RedisServer) Start() error {
	if r.proc != nil {
		return fmt.Errorf("redis-server on port %d is running already", r.Port)
	}
	for try := 1; ; try++ {
		err := r.start()
		if err == nil {
			r.started = true
			return nil
		}
		if !errors.Is(err, ErrAddrInUse) || r.started || try == PortTries {
			return err
		}
		if err := r.choosePorts(); err != nil {
			return err
		}
	}
}

// start is one start of redis-server on the server's ports.
func (r *RedisServer) start() error {
	args := append(slices.Clone(r.cfg.Args), "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.cfg.Dir)
	if r.cfg.ClusterBus {
		args = append(args, "--cluster-port", strconv.Itoa(r.busPort))
	}
	if r.cfg.Password != "" {
		args = append(args, "--requirepass", r.cfg.Password)
	}
	p, err := Start("redis-server", Command([]string{"PATH=" + os.Getenv("PATH")}, r.cfg.Path, args...), r.Out)
	if err != nil {
		return err
	}
	r.proc = p
	listening := Listening(r.Addr())
	err = WaitFor(context.Background(), p, 10*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		if err := listening(ctx); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		// The server's own answer, not that of another process on the
		// port: one that took it first, while this one fails to bind it.
		info, err := r.Client.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if pid := infoField(info, "process_id"); pid != strconv.Itoa(p.Pid()) {
			return fmt.Errorf("another process answers on port %d (process_id %s, not %d)", r.Port, pid, p.Pid())
		}
		return nil
	})
	if errors.Is(err, ErrExited) {
		r.proc = nil
		if p.AddrInUse() {
			return fmt.Errorf("redis-server on port %d: %w", r.Port, ErrAddrInUse)
		}
		return fmt.Errorf("redis-server on port %d exited at start: %v\n%s", r.Port, p.Cmd.ProcessState, r.Out.Tail(4<<10))
	}
	if err != nil {
		return fmt.Errorf("redis-server on port %d does not answer: %w", r.Port, err)
	}
	return nil
}

// infoField is the value of field in the answer to INFO, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Stop kills the server (SIGKILL, like a crash) and waits (at most 10 s)
// until it has exited. A stopped server may be started again.
func (r *RedisServer) Stop() error {
	if r.proc == nil {
		return nil
	}
	err := r.proc.Kill(10 * time.Second)
	r.proc = nil
	return err
}

// Close stops the server and closes its client.
func (r *RedisServer) Close() error {
	err := r.Stop()
	_ = r.Client.Close()
	return err
}

// SentinelConfig is a sentinel of a RedisServer.
type SentinelConfig struct {
	Path string // the redis-server binary
	// Dir holds the sentinel's configuration file, which the sentinel
	// rewrites as it learns: it must be the sentinel's own.
	Dir string
	// Master is the name the primary is monitored under, Quorum how many
	// sentinels must agree that it is down.
	Master string
	Quorum int
	// Lines are further lines of the configuration file, such as
	// "sentinel down-after-milliseconds NAME 1000".
	Lines []string
}

// NewSentinel prepares a sentinel monitoring primary (with primary's
// password, which it requires of its own clients too); Start starts it.
func NewSentinel(cfg SentinelConfig, primary *RedisServer) (*RedisServer, error) {
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n", cfg.Master, primary.Port, cfg.Quorum)
	if pw := primary.cfg.Password; pw != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", cfg.Master, pw)
	}
	for _, l := range cfg.Lines {
		conf += l + "\n"
	}
	path := filepath.Join(cfg.Dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return NewRedisServer(RedisConfig{Path: cfg.Path, Dir: cfg.Dir, Args: []string{path, "--sentinel"}, Password: primary.cfg.Password})
}
