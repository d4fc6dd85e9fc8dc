package jobs

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRecoveryScriptsOfAsynq: the asynq scripts that Recovery stands in for
// (dequeue, done) or repeats (requeue, in rescueScript) are, in the asynq
// this binary is built with, the ones Recovery was written against: the
// same version in go.mod, and the same SHA-1 of each script's source, read
// from the module's own rdb.go. A change of asynq fails here, naming the script to
// read again, before it can fail in production.
func TestRecoveryScriptsOfAsynq(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/hibiken/asynq").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/hibiken/asynq: %v", err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != asynqVersion {
		t.Fatalf("go.mod has asynq %q; Recovery's scripts were checked against %s: compare its rdb.go scripts with Recovery's, then update asynqVersion and the SHAs", version, asynqVersion)
	}
	src, err := os.ReadFile(filepath.Join(dir, "internal", "rdb", "rdb.go"))
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)var (\\w+) = redis\\.NewScript\\(`(.*?)`\\)").FindAllStringSubmatch(string(src), -1) {
		scripts[m[1]] = m[2]
	}
	for name, want := range map[string]string{
		"dequeueCmd": asynqDequeueSHA, // stood in for by dequeueClaim
		"doneCmd":    asynqDoneSHA,    // stood in for by doneClaim
		"requeueCmd": asynqRequeueSHA, // repeated by rescueScript
	} {
		body, ok := scripts[name]
		if !ok {
			t.Errorf("asynq %s has no script %s", version, name)
			continue
		}
		sum := sha1.Sum([]byte(body))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("asynq %s's %s has SHA-1 %s, Recovery's copy was written against %s", version, name, got, want)
		}
	}
}
