package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// pgServer is a private PostgreSQL cluster for one test, on its own loopback
// port, so the test can stop and restart it without touching the shared
// server everyone else uses.
type pgServer struct {
	bin  string // directory of initdb and postgres
	dir  string // data directory
	port int
	cred *syscall.Credential // the postgres user when the test runs as root
	out  *harness.Output
	proc *harness.Process
	// settings are extra `-c name=value` options, given after the defaults
	// of start so that they override them.
	settings []string
}

// postgresBinDir finds the directory holding initdb and postgres:
// GATEHOUSE_PG_BIN, `pg_config --bindir`, the newest /usr/lib/postgresql/*/bin,
// or the directory of initdb on PATH.
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, n := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("GATEHOUSE_PG_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("GATEHOUSE_PG_BIN=%s holds no initdb and postgres", d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if has(dirs[i]) {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no initdb and postgres found (GATEHOUSE_PG_BIN, pg_config, /usr/lib/postgresql/*/bin, PATH)")
}

// startPostgres initialises a cluster in a temporary directory and starts it
// on a free loopback port, with settings (name=value) over the defaults of
// start. initdb refuses to run as root, so as root the cluster belongs to
// the postgres user, in a directory of its own outside the checkout
// (serviceDir). The server is killed and its directory removed when the
// test ends.
func startPostgres(t *testing.T, settings ...string) *pgServer {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		testenv.Missing(t, "project-local PostgreSQL: %v", err)
	}
	cred, err := serviceUser()
	if err != nil {
		testenv.Missing(t, "project-local PostgreSQL: %v", err)
	}
	if err := reachable(filepath.Join(bin, "postgres"), cred, 0o1); err != nil {
		testenv.Missing(t, "project-local PostgreSQL: postgres cannot be run as %s: %v", credName(cred), err)
	}
	dir := serviceDir(t, cred, "gatehouse-pg-")
	p := &pgServer{bin: bin, dir: filepath.Join(dir, "data"), port: testenv.FreePort(t), cred: cred, out: new(harness.Output), settings: settings}
	if out, err := p.tool("initdb", "-D", p.dir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale", "C"); err != nil {
		testenv.Missing(t, "project-local PostgreSQL: initdb: %v\n%s", err, out)
	}
	p.cleanup(t, "postgres")
	p.start(t)
	return p
}

// tool runs one of the server's programs (initdb, pg_basebackup, pg_ctl) as
// the cluster's owner, in the cluster's directory (the programs complain
// when they cannot enter the one they start in), and returns its output.
func (p *pgServer) tool(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = filepath.Dir(p.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return cmd.CombinedOutput()
}

// cleanup kills the server when the test ends, and shows its output
// (named what) if the test failed.
func (p *pgServer) cleanup(t *testing.T, what string) {
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("---- %[1]s output (tail) ----\n%[2]s\n---- end of %[1]s output ----", what, p.out.Tail(16<<10))
		}
	})
}

// url is the URL of database db on the private server.
func (p *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// start runs postgres on p.port and waits until it accepts connections;
// it returns when it did.
func (p *pgServer) start(t *testing.T) time.Time {
	t.Helper()
	args := []string{"-D", p.dir, "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + filepath.Dir(p.dir),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB"}
	for _, s := range p.settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	cmd.Dir = filepath.Dir(p.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	proc, err := harness.Start("postgres", cmd, p.out)
	if err != nil {
		testenv.Missing(t, "project-local PostgreSQL: %v", err)
	}
	p.proc = proc
	err = harness.WaitFor(context.Background(), proc, 30*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, p.url("postgres"))
		if err == nil {
			c.Close(ctx)
		}
		return err
	})
	if errors.Is(err, harness.ErrExited) {
		testenv.Missing(t, "project-local PostgreSQL on port %d exited at start: %v\n%s", p.port, proc.Cmd.ProcessState, p.out.Tail(4<<10))
	}
	if err != nil {
		testenv.Missing(t, "project-local PostgreSQL on port %d does not accept connections: %v", p.port, err)
	}
	return time.Now()
}

// stop shuts the server down the way `pg_ctl stop -m fast` does (SIGINT:
// sessions are cut, the cluster is checkpointed) and waits until it exited.
func (p *pgServer) stop(t *testing.T) {
	t.Helper()
	if p.proc == nil {
		return
	}
	if !p.proc.Stop(syscall.SIGINT, 30*time.Second) {
		t.Errorf("postgres did not exit 30s after SIGINT; killed it")
	}
	p.proc = nil
}

// kill ends the server for good at cleanup: a fast shutdown, SIGKILL if it hangs.
func (p *pgServer) kill(t *testing.T) {
	t.Helper()
	if p.proc == nil {
		return
	}
	p.proc.Stop(syscall.SIGINT, 15*time.Second)
	p.proc = nil
}

// newDB creates database name on the server, migrates it with the built
// `api migrate` and returns it as the testenv.DB the stack runs on.
func (p *pgServer) newDB(t *testing.T, bins binaries, name string) testenv.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the project-local PostgreSQL: %v", err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	admin.Close(ctx)
	if err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	url := p.url(name)
	cmd := exec.Command(bins.api, "migrate")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + url}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("api migrate: %v\n%s", err, out)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(pool.Close)
	return testenv.DB{Pool: pool, URL: url, Name: name}
}
