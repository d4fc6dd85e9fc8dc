package doccheck

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// repoFiles lists the files of the repository: what git tracks, and what it
// would add (untracked and not ignored), that is still on disk. Without git
// it walks the tree, leaving out what is never committed.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for _, f := range bytes.Split(out, []byte{0}) {
			if len(f) == 0 {
				continue
			}
			if info, err := os.Lstat(filepath.Join(root, string(f))); err == nil && info.Mode().IsRegular() {
				files = append(files, string(f))
			}
		}
		return files
	}
	t.Logf("git ls-files: %v; walking the tree instead", err)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", ".dev":
				return filepath.SkipDir
			}
			if rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && !strings.HasSuffix(rel, ".test") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestReferencesResolve: every file, link, anchor and section that the
// repository's docs, comments, manifests and scripts refer to is in the
// repository.
func TestReferencesResolve(t *testing.T) {
	start := time.Now()
	root := repoRoot(t)
	files := repoFiles(t, root)
	if len(files) < 100 {
		t.Fatalf("%d files found under %s, want the repository", len(files), root)
	}
	repo := New(files, func(name string) ([]byte, error) {
		return os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	})
	problems, err := repo.CheckAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d files, %d checked, in %s", len(files), countScanned(files), time.Since(start).Round(time.Millisecond))
}

func countScanned(files []string) int {
	n := 0
	for _, f := range files {
		if Scanned(f) {
			n++
		}
	}
	return n
}
