package e2e

// The previous release, built from git, for the rolling-upgrade tests (F13 of
// docs/reliability.md).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// release is one release's binaries and the API description they answer by.
type release struct {
	name   string // "previous" or "new", for messages
	commit string // "" for the checkout under test
	bins   binaries
	spec   *testenv.Spec
}

var (
	previousOnce sync.Once
	previous     release
	previousTook time.Duration
	previousErr  error
	// previousAbsent says why the previous release cannot be built here at
	// all (not an error of the code under test): its commit is not in this
	// clone, or git is missing.
	previousAbsent string
)

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// previousReleaseCommit reads testdata/previous-release: the commit of the
// release this one upgrades from.
func previousReleaseCommit() (string, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "previous-release"))
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !commitHash.MatchString(line) {
			return "", fmt.Errorf("testdata/previous-release: %q is not a full commit hash", line)
		}
		return line, nil
	}
	return "", errors.New("testdata/previous-release names no commit")
}

// previousRelease returns the previous release's api and worker and its
// api/openapi.yaml, built once per test binary. They are cached in
// bin/previous/<commit>/ of the checkout (bin/ is not committed), so only the
// first run on a machine builds them: git archive of the commit, then go
// build there, which may download that release's modules.
//
// When the commit is not in the clone (a shallow clone, a source tarball),
// the test is skipped, or fails under GATEHOUSE_REQUIRE_SERVICES=1 or CI=true
// as for a missing service: a release check that silently skips in CI would
// let a release out whose upgrade was never tried, while a developer's
// shallow clone should not fail for something its code cannot fix. The
// message says how to fetch the commit.
func previousRelease(t *testing.T) release {
	t.Helper()
	previousOnce.Do(func() {
		start := time.Now()
		previous, previousAbsent, previousErr = buildPrevious()
		previousTook = time.Since(start)
	})
	if previousAbsent != "" {
		testenv.Missing(t, "the previous release cannot be built: %s", previousAbsent)
	}
	if previousErr != nil {
		t.Fatalf("build the previous release: %v", previousErr)
	}
	return previous
}

func buildPrevious() (rel release, absent string, err error) {
	commit, err := previousReleaseCommit()
	if err != nil {
		return rel, "", err
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return rel, "", err
	}
	parent := filepath.Join(root, "bin", "previous")
	dir := filepath.Join(parent, commit)
	if !releaseBuilt(dir) {
		if absent, err := buildRelease(root, parent, commit); absent != "" || err != nil {
			return rel, absent, err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "openapi.yaml"))
	if err != nil {
		return rel, "", err
	}
	spec, err := testenv.ParseSpec(b)
	if err != nil {
		return rel, "", fmt.Errorf("the previous release's api/openapi.yaml: %w", err)
	}
	return release{name: "previous", commit: commit, spec: spec,
		bins: binaries{api: filepath.Join(dir, "api"), worker: filepath.Join(dir, "worker")}}, "", nil
}

// releaseBuilt reports whether dir holds a finished build. A build is
// renamed into place whole, so a directory that exists is complete.
func releaseBuilt(dir string) bool {
	for _, f := range []string{"api", "worker", "openapi.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// buildRelease builds commit's cmd/api and cmd/worker into parent/<commit>,
// with its api/openapi.yaml beside them. They are built without the race
// detector: that release's own tests ran it, and here its binaries are the
// surroundings of the code under test; they run at half the CPU.
func buildRelease(root, parent, commit string) (absent string, err error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return "git is not on PATH", nil
	}
	if out, err := exec.Command(git, "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return fmt.Sprintf("commit %s (testdata/previous-release) is not in this clone (%v: %s); fetch it with "+
			"`git fetch --unshallow` or `git fetch origin %s`", commit, err, bytes.TrimSpace(out), commit), nil
	}
	src, err := os.MkdirTemp("", "gatehouse-previous-src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := filepath.Join(src, "release.tar")
	if out, err := exec.Command(git, "-C", root, "archive", "--output", archive, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", commit, err, out)
	}
	tree := filepath.Join(src, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.Command("tar", "-x", "-f", archive, "-C", tree).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack the archive of %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, commit+".building-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // left only when the rename below did not happen
	cmd := exec.Command(harness.GoTool(), "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-X github.com/gatehouse-pay/gatehouse/internal/metrics.Version="+commit[:12],
		"-o", tmp+string(os.PathSeparator), "./cmd/api", "./cmd/worker")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/api ./cmd/worker at %s: %v\n%s", commit, err, out)
	}
	spec, err := os.ReadFile(filepath.Join(tree, "api", "openapi.yaml"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "openapi.yaml"), spec, 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	// Another test binary may have finished the same build meanwhile; its
	// directory is as good as this one.
	if err := os.Rename(tmp, filepath.Join(parent, commit)); err != nil && !releaseBuilt(filepath.Join(parent, commit)) {
		return "", err
	}
	return "", nil
}

// migrateWith runs `api migrate` of the given binary on db.
func migrateWith(t *testing.T, api string, db testenv.DB) time.Duration {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(api, "migrate")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + db.URL}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s migrate: %v\n%s", api, err, out)
	}
	return time.Since(start)
}

// schemaVersion is the highest migration applied to db.
func schemaVersion(t *testing.T, db testenv.DB) int64 {
	t.Helper()
	return queryInt(t, db, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`)
}

// TestPreviousReleaseAbsent: a commit the clone does not have (a shallow
// clone's) is reported as absent, with the command that fetches it, and not
// as a failed build; previousRelease then skips or fails as for a missing
// service.
func TestPreviousReleaseAbsent(t *testing.T) {
	parallel(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.Repeat("0", 39) + "1"
	parent := t.TempDir()
	absent, err := buildRelease(root, parent, commit)
	if err != nil || !strings.Contains(absent, "is not in this clone") || !strings.Contains(absent, "git fetch origin "+commit) {
		t.Errorf("build of a commit not in the clone: absent %q, error %v; want it absent with the fetch command", absent, err)
	}
	if releaseBuilt(filepath.Join(parent, commit)) {
		t.Errorf("a build of a missing commit was left in %s", parent)
	}
}
