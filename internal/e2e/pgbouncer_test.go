package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// The stacks of the end-to-end tests reach PostgreSQL through PgBouncer in
// transaction mode, the pooler docs/scaling.md recommends, with
// DATABASE_POOL_MODE=transaction, unless GATEHOUSE_E2E_PGBOUNCER=0. Stacks
// on a project-local server of their own (F4, F8, the standby reads), or
// started with stackOptions.direct, connect directly; so does everything
// the tests themselves run on the database (testenv.DB's pool, migrate).

// pgbouncerWanted reports whether stacks go through PgBouncer.
func pgbouncerWanted() bool { return os.Getenv("GATEHOUSE_E2E_PGBOUNCER") != "0" }

// pgbouncerPath finds pgbouncer on PATH or where Debian's package puts it.
// Without it the stack connects directly, or the test fails under
// GATEHOUSE_REQUIRE_SERVICES=1. The path is the installed file, not the
// link in the checkout's bin/tools: as root PgBouncer runs as postgres,
// who may not enter the checkout (a clone under a 0700 directory; see
// runas_test.go).
func pgbouncerPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real
		}
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	if testenv.ServicesRequired() {
		t.Fatalf("pgbouncer is not installed (deploy/local/tools.sh installs it; GATEHOUSE_E2E_PGBOUNCER=0 runs the stack on PostgreSQL directly)")
	}
	t.Logf("pgbouncer is not installed: the stack connects to PostgreSQL directly")
	return ""
}

// pgBouncer is a private PgBouncer in transaction mode in front of one
// PostgreSQL server, for one test.
type pgBouncer struct {
	port int
	out  *harness.Output
	proc *harness.Process
}

// onSharedServer reports whether db lives on the server testenv clones
// databases on (not on a project-local one of the test's own).
func onSharedServer(db testenv.DB) bool {
	a, err1 := url.Parse(db.URL)
	b, err2 := url.Parse(testenv.PostgresURL())
	return err1 == nil && err2 == nil && a.Host == b.Host
}

// startPgBouncer starts PgBouncer on a free loopback port in front of the
// server of db, in transaction mode, and gives db's sessions the
// lock_timeout the binaries cannot set through it (docs/scaling.md). It
// returns the URL of db through it; the process is stopped when the test
// ends (after the binaries, which are registered later).
func startPgBouncer(t *testing.T, path string, db testenv.DB) string {
	t.Helper()
	server, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("database URL: %v", err)
	}
	host, serverPort := server.Hostname(), cmp.Or(server.Port(), "5432")
	userName := server.User.Username()
	password, _ := server.User.Password()

	ctx, cancel := dbCtx()
	defer cancel()
	if _, err := db.Pool.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET lock_timeout = '3s'"); err != nil {
		t.Fatalf("set the database's lock_timeout: %v", err)
	}

	cred, err := serviceUser()
	if err != nil {
		t.Fatal(err)
	}
	if err := reachable(path, cred, 0o1); err != nil {
		t.Fatalf("pgbouncer cannot be run as %s: %v (install it where every user may run it, as Debian's package does)", credName(cred), err)
	}
	dir := serviceDir(t, cred, "gatehouse-pgbouncer-")
	b := &pgBouncer{out: new(harness.Output)}
	// PgBouncer cannot say which port it took on port 0: it gets a free
	// port, and another one when the port was taken before it bound it.
	port, err := harness.OnFreePort(func(port int) error {
		return b.start(path, dir, cred, host, serverPort, userName, password, port)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.port = port
	t.Cleanup(func() {
		b.proc.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("---- pgbouncer output (tail) ----\n%s\n---- end of pgbouncer output ----", b.out.Tail(16<<10))
		}
	})

	through := *server
	through.Host = fmt.Sprintf("127.0.0.1:%d", b.port)
	q := through.Query()
	q.Set("sslmode", "disable")
	through.RawQuery = q.Encode()
	b.waitReady(t, through.String())
	return through.String()
}

// start runs PgBouncer on port in dir, as cred, in front of the server at
// host:serverPort, and waits until it says it listens there. When it
// exits first because the port was taken, the error wraps
// harness.ErrAddrInUse; on an error nothing is left running.
func (b *pgBouncer) start(path, dir string, cred *syscall.Credential, host, serverPort, userName, password string, port int) error {
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
server_lifetime = 600
server_idle_timeout = 60
logfile =
pidfile =
log_connections = 0
log_disconnections = 0
`, host, serverPort, port, filepath.Join(dir, "users.txt"))
	files := map[string]string{
		"pgbouncer.ini": ini,
		"users.txt":     fmt.Sprintf("%q %q\n", userName, password),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	if err := chownTree(dir, cred); err != nil {
		return err
	}
	cmd := exec.Command(path, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	// PgBouncer refuses to run as root: as root it runs as postgres.
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	fmt.Fprintf(b.out, "==== test: pgbouncer on port %d ====\n", port)
	proc, err := harness.Start("pgbouncer", cmd, b.out)
	if err != nil {
		return err
	}
	// Its own word that it bound the port, not an answer there, which could
	// come from a process that took the port first.
	listening := "listening on " + harness.Loopback(port)
	_, err = harness.WaitOutput(proc, 15*time.Second, func(line string) (string, bool) {
		return "", strings.HasSuffix(strings.TrimSpace(line), listening)
	})
	switch {
	case err == nil:
		b.proc = proc
		return nil
	case proc.AddrInUse():
		return fmt.Errorf("pgbouncer on port %d: %w", port, harness.ErrAddrInUse)
	}
	proc.Stop(syscall.SIGKILL, 10*time.Second)
	return fmt.Errorf("pgbouncer on port %d: %w\n%s", port, err, proc.Tail(4<<10))
}

// waitReady connects through PgBouncer until a query answers.
func (b *pgBouncer) waitReady(t *testing.T, dbURL string) {
	t.Helper()
	testenv.WaitReady(t, fmt.Sprintf("pgbouncer on port %d", b.port), b.proc, waitFloor, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cfg, err := pgx.ParseConfig(dbURL)
		if err != nil {
			return err
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "SELECT 1")
		return err
	})
}

// databaseEnv is the stack's database settings: db directly, or through a
// PgBouncer of the test's own in transaction mode.
func databaseEnv(t *testing.T, db testenv.DB, direct bool) []string {
	t.Helper()
	if direct || !pgbouncerWanted() || !onSharedServer(db) {
		return []string{"DATABASE_URL=" + db.URL}
	}
	path := pgbouncerPath(t)
	if path == "" {
		return []string{"DATABASE_URL=" + db.URL}
	}
	through := startPgBouncer(t, path, db)
	t.Logf("the stack reaches PostgreSQL through PgBouncer (transaction mode); GATEHOUSE_E2E_PGBOUNCER=0 connects directly")
	return []string{"DATABASE_URL=" + through, "DATABASE_POOL_MODE=transaction"}
}
