package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
}

// RedisServer is a redis-server of the caller's own on a free loopback
// port, which it may stop (like a crash) and start again on the same port.
type RedisServer struct {
	Port int
	Out  *Output // what every start of the server wrote
	// Client reaches DB 0 of the server (or the sentinel) with a short dial
	// timeout and no retries.
	Client *redis.Client
	cfg    RedisConfig
	proc   *Process
}

// NewRedisServer picks the server's port and makes its client; Start
// starts it.
func NewRedisServer(cfg RedisConfig) (*RedisServer, error) {
	if cfg.Path == "" || cfg.Dir == "" {
		return nil, errors.New("redis-server: a binary and a directory are required")
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Port: port, Out: new(Output), cfg: cfg}
	r.Client = redis.NewClient(&redis.Options{Addr: r.Addr(), Password: cfg.Password,
		DialTimeout: 250 * time.Millisecond, MaxRetries: -1})
	return r, nil
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
// until it answers PING. It first waits for the port to listen, so that the
// client logs no refused dial.
func (r *RedisServer) Start() error {
	if r.proc != nil {
		return fmt.Errorf("redis-server on port %d is running already", r.Port)
	}
	args := append(slices.Clone(r.cfg.Args), "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.cfg.Dir)
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
		return r.Client.Ping(ctx).Err()
	})
	if errors.Is(err, ErrExited) {
		r.proc = nil
		return fmt.Errorf("redis-server on port %d exited at start: %v\n%s", r.Port, p.Cmd.ProcessState, r.Out.Tail(4<<10))
	}
	if err != nil {
		return fmt.Errorf("redis-server on port %d does not answer PING: %w", r.Port, err)
	}
	return nil
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
