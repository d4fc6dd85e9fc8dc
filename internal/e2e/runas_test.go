package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// PostgreSQL's programs and PgBouncer refuse to run as root: as root the
// tests run them as the postgres user. That user may reach nothing of
// ours: not the checkout (a clone under a private directory, such as one
// of mktemp -d or /root), not the targets of bin/tools's links (in the
// caller's cache), not a private TMPDIR (pam_tmpdir's /tmp/user/0). So such
// a program runs from its installed file, checked with reachable, in a
// directory of serviceDir that holds its configuration, data, sockets and
// logs, and that is its working directory too.

// serviceUser is who PostgreSQL's programs and PgBouncer run as: nil (as
// we are) unless we are root; then the postgres user, with its group and
// no other.
func serviceUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run PostgreSQL's programs and PgBouncer as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of postgres: %w", err)
	}
	// Groups stays empty: the child gets no supplementary group, which is
	// what reachable assumes.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// credName names cred's user for messages.
func credName(cred *syscall.Credential) string {
	if cred == nil {
		return "this user"
	}
	if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil {
		return "user " + u.Username
	}
	return fmt.Sprintf("uid %d", cred.Uid)
}

// permits reports whether the mode bits of fi grant cred's user (its uid
// and group, nothing else) every bit of want (0o1 search or execute, 0o2
// write, 0o4 read). A nil cred is us: the test trusts its own access.
func permits(fi fs.FileInfo, cred *syscall.Credential, want fs.FileMode) bool {
	if cred == nil || cred.Uid == 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == cred.Uid:
		perm >>= 6
	case st.Gid == cred.Gid:
		perm >>= 3
	}
	return perm&want == want
}

// reachable returns nil when a process running as cred may use path with
// the access want (0o1 to run a program or enter a directory): every
// directory on the way lets it search, on the way to path as written (a
// link in a checkout) and to the file it resolves to, and that file grants
// want. It reads mode bits only, no ACL.
func reachable(path string, cred *syscall.Credential, want fs.FileMode) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !permits(fi, cred, want) {
		return fmt.Errorf("%s (%s, owner uid %d) does not let %s %s it", real, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, credName(cred), access(want))
	}
	for _, p := range []string{abs, real} {
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			if err != nil {
				return err
			}
			if !permits(fi, cred, 0o1) {
				return fmt.Errorf("%s is on the way to %s and does not let %s enter it (%s, owner uid %d)", dir, p, credName(cred), fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid)
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	return nil
}

func access(want fs.FileMode) string {
	switch want {
	case 0o1:
		return "run or enter"
	case 0o4:
		return "read"
	}
	return "use (" + want.String() + ")"
}

// serviceDir makes a new directory, removed when the test ends, for a
// program that runs as cred: owned by cred's user, under os.TempDir() when
// that user can enter it and under /tmp when not (never in the checkout).
func serviceDir(t *testing.T, cred *syscall.Credential, pattern string) string {
	t.Helper()
	base := os.TempDir()
	if err := reachable(base, cred, 0o1); err != nil {
		t.Logf("%v: the directory of %s goes under /tmp", err, pattern)
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := reachable(dir, cred, 0o7); err != nil {
		t.Fatalf("a directory for a program that runs as %s: %v", credName(cred), err)
	}
	return dir
}

// chownTree gives the files of dir (not dir itself) to cred's user.
func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// TestReachable: reachable sees what another user may not enter, on the
// way to a link as well as to its target. It needs no service and no root:
// it judges mode bits for a user that is not us.
func TestReachable(t *testing.T) {
	parallel(t)
	other := &syscall.Credential{Uid: uint32(os.Getuid()) + 1000, Gid: uint32(os.Getgid()) + 1000}
	if err := reachable(os.TempDir(), other, 0o1); err != nil {
		t.Skipf("another user may not enter the temporary directory: %v", err)
	}
	mk := func(mode os.FileMode) string {
		d, err := os.MkdirTemp("", "gatehouse-reachable-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	open, private := mk(0o755), mk(0o700)
	prog := filepath.Join(open, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(private, "tools", "prog") // bin/tools/pgbouncer in a private checkout
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(prog, link); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(private, "tools", "hidden")
	if err := os.WriteFile(hidden, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	notRunnable := filepath.Join(open, "data")
	if err := os.WriteFile(notRunnable, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{prog, true}, {open, true}, {link, false}, {hidden, false}, {private, false}, {notRunnable, false},
	} {
		if err := reachable(c.path, other, 0o1); (err == nil) != c.ok {
			t.Errorf("reachable(%s) by another user: %v, want reachable %t", c.path, err, c.ok)
		}
		if err := reachable(c.path, nil, 0o1); err != nil {
			t.Errorf("reachable(%s) by us: %v", c.path, err)
		}
	}
	if err := reachable(link, other, 0o1); err == nil || !strings.Contains(err.Error(), private) {
		t.Errorf("the link's error does not name the private directory %s: %v", private, err)
	}
}
