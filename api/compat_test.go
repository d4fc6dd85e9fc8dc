package api_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gatehouse-pay/gatehouse/api"
)

// The API stability check of make api-compat (deploy/local/api-compat.sh) run
// on a change made on purpose: GET /healthz loses the required property
// `status` of its 200 answer. The check has to report it while the changelog
// does not name it, and accept it once a line does, as docs/api-changelog.md
// says. make api-compat itself compares the released description with the
// current one.

// healthzBreak is oasdiff's text of the change, as the check prints it.
const healthzBreak = "removed the required property `status` from the response with the `200` status"

func TestCompatCheckReportsBreakingChange(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.yaml")
	revision := filepath.Join(dir, "revision.yaml")
	writeFile(t, base, reencode(t, nil))
	writeFile(t, revision, reencode(t, removeHealthStatus))

	for _, tc := range []struct {
		name, changelog string
		accepted        bool
	}{
		{"not named", "# Changes\n\nNothing about health checks.\n", false},
		{"named with the reason",
			"# Changes\n\n- GET /healthz (`200`): " + healthzBreak + ", because the status said nothing the code did not.\n", true},
		{"named in other words", "# Changes\n\n- GET /healthz: the `status` is gone, because it said nothing.\n", false},
		{"another operation", "# Changes\n\n- GET /readyz (`200`): " + healthzBreak + ", because.\n", false},
		// The first word that begins with "/" has to be the path itself: in
		// backticks it is "/healthz`", which names no operation.
		{"path in backticks", "# Changes\n\n- `GET /healthz` (`200`): " + healthzBreak + ", because.\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			changelog := filepath.Join(t.TempDir(), "changelog.md")
			writeFile(t, changelog, []byte(tc.changelog))
			out, err := runCompat(t, base, revision, changelog)
			switch {
			case tc.accepted && err != nil:
				t.Fatalf("the check refused a change the changelog names: %v\n%s", err, out)
			case !tc.accepted && err == nil:
				t.Fatalf("the check accepted a breaking change the changelog does not name:\n%s", out)
			case !tc.accepted:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Fatalf("the check failed with %v, not exit status 1:\n%s", err, out)
				}
				if !strings.Contains(out, "GET /healthz") || !strings.Contains(out, healthzBreak) {
					t.Errorf("the output does not name GET /healthz and %q:\n%s", healthzBreak, out)
				}
			}
		})
	}

	t.Run("no change", func(t *testing.T) {
		t.Parallel()
		changelog := filepath.Join(t.TempDir(), "changelog.md")
		writeFile(t, changelog, []byte("# Changes\n"))
		if out, err := runCompat(t, base, base, changelog); err != nil {
			t.Fatalf("the check refused a description compared with itself: %v\n%s", err, out)
		}
	})
}

// runCompat runs deploy/local/api-compat.sh on two descriptions and a changelog.
func runCompat(t *testing.T, base, revision, changelog string) (string, error) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "deploy", "local", "api-compat.sh"), base, revision, changelog)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// reencode returns openapi.yaml decoded into YAML nodes, changed by change
// (when not nil), and encoded again; both sides of a comparison go through it.
func reencode(t *testing.T, change func(t *testing.T, doc *yaml.Node)) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(api.Spec, &doc); err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(t, &doc)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// removeHealthStatus drops `status` from the schema Health, the 200 answer of
// GET /healthz: from its properties and from its required ones.
func removeHealthStatus(t *testing.T, doc *yaml.Node) {
	t.Helper()
	health := lookup(t, doc.Content[0], "components", "schemas", "Health")
	props := lookup(t, health, "properties")
	i := slices.IndexFunc(props.Content, func(n *yaml.Node) bool { return n.Value == "status" })
	if i < 0 || i%2 != 0 {
		t.Fatal("components.schemas.Health.properties has no status")
	}
	props.Content = slices.Delete(props.Content, i, i+2)
	required := lookup(t, health, "required")
	j := slices.IndexFunc(required.Content, func(n *yaml.Node) bool { return n.Value == "status" })
	if j < 0 {
		t.Fatal("components.schemas.Health.required has no status")
	}
	required.Content = slices.Delete(required.Content, j, j+1)
}

// lookup follows keys through YAML mappings.
func lookup(t *testing.T, n *yaml.Node, keys ...string) *yaml.Node {
	t.Helper()
	for _, key := range keys {
		if n.Kind != yaml.MappingNode {
			t.Fatalf("%s: not a mapping", key)
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			t.Fatalf("openapi.yaml has no %s", strings.Join(keys, "."))
		}
		n = next
	}
	return n
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
