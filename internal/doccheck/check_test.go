package doccheck

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// fixture is a small repository the checker's cases run against.
var fixture = map[string]string{
	"README.md": "# Example\n",
	"docs/guide.md": "# Guide\n\n## Apply, migrations first\n\n## Probes\n\n## Probes\n\n" +
		"```sh\n# not a heading\n```\n\n- **Unknown outcomes**: a label.\n",
	"docs/other.md":             "# Other\n",
	"docs/runbooks/Alert.md":    "# Alert\n",
	"internal/store/store.go":   "package store\n",
	"deploy/k8s/base/api.yaml":  "kind: Deployment\n",
	"examples/ts/internal/a.ts": "export {}\n",
}

func fixtureRepo() *Repo {
	var files []string
	for f := range fixture {
		files = append(files, f)
	}
	r := New(files, func(name string) ([]byte, error) {
		s, ok := fixture[name]
		if !ok {
			return nil, os.ErrNotExist
		}
		return []byte(s), nil
	})
	return r
}

// TestCheck: what the checker reports for one file's text, as "line: ref".
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, file, text string
		want             []string
	}{
		{"link to a file", "docs/x.md", "See [the guide](guide.md) and [the README](../README.md).", nil},
		{"link to a missing file", "docs/x.md", "See\n[the ops](operations.md).", []string{"2: operations.md"}},
		{"link to a directory", "docs/x.md", "The [runbooks](runbooks/) and [more](runbooks/Alert.md).", nil},
		{"link to an anchor", "docs/x.md", "[Apply](guide.md#apply-migrations-first), [probes](guide.md#probes-1)", nil},
		{"link to a missing anchor", "docs/x.md", "[Probes](guide.md#probes-2) [Retention](guide.md#retention)",
			[]string{"1: guide.md#probes-2", "1: guide.md#retention"}},
		{"a fenced heading is no anchor", "docs/x.md", "[x](guide.md#not-a-heading)", []string{"1: guide.md#not-a-heading"}},
		{"anchor in the same file", "docs/x.md", "# Top\n\n## Here it is\n\n[here](#here-it-is) [gone](#gone)", []string{"5: #gone"}},
		{"link outside the repository", "docs/x.md", "[up](../../elsewhere.md)", []string{"1: ../../elsewhere.md"}},
		{"links in code are not links", "docs/x.md", "```\n[a](nowhere/)\n```\n`[b](gone.txt)`", nil},
		{"names in code are", "docs/x.md", "```sh\ncat docs/gone.md\n```", []string{"2: docs/gone.md"}},
		{"a URL is not checked as a path", "docs/x.md", "[Stripe](https://stripe.com/docs/api.md) and https://example.com/internal/nowhere", nil},
		{"repository URL", "deploy/k8s/rules.yaml", "runbook_url: " + RepoURL + "blob/main/docs/runbooks/Alert.md", nil},
		{"repository URL to a missing file", "deploy/k8s/rules.yaml", "url: " + RepoURL + "blob/main/docs/runbooks/Gone.md",
			[]string{"1: " + RepoURL + "blob/main/docs/runbooks/Gone.md"}},
		{"repository URL to a missing anchor", "deploy/k8s/rules.yaml", "url: " + RepoURL + "blob/main/docs/guide.md#gone",
			[]string{"1: " + RepoURL + "blob/main/docs/guide.md#gone"}},
		{"paths in a comment", "internal/x/x.go", "package x\n\n// See internal/store, deploy/k8s/base/api.yaml and docs/guide.md.\nvar x = 1\n", nil},
		{"missing paths in a comment", "internal/x/x.go", "package x\n\n/* internal/stor\n   api/openapi.yaml */\n",
			[]string{"3: internal/stor", "4: api/openapi.yaml"}},
		{"Go strings are code, not references", "internal/x/x_test.go", "package x\n\nvar names = []string{\"api/new.yaml\", \"NOTES.md\"}\n", nil},
		{"a path inside another path is not the repository's", "deploy/local/tools.sh", "go build ./cmd/promtool github.com/a/b/internal/rdb", nil},
		{"kubectl objects", "docs/x.md", "kubectl -n gatehouse logs deploy/gatehouse-worker", nil},
		{"a relative path", "examples/ts/README.md", "`internal/a.ts` and [it](internal/a.ts)", nil},
		{"a Markdown name", "internal/x/x.go", "package x\n\n// README.md, guide.md and runbooks/Alert.md are docs.\n", nil},
		{"anchors after a Markdown name", "internal/x/x.go", "package x\n\n// docs/guide.md#probes, docs/guide.md#gone.\n",
			[]string{"3: docs/guide.md#gone"}},
		{"a missing Markdown name", "internal/x/x.go", "package x\n\n// As NOTES.md and ROADMAP.md say.\n",
			[]string{"3: NOTES.md", "3: ROADMAP.md"}},
		{"Markdown names next to each other", "docs/x.md", "CHANGES.md,HACKING.md guide.md", []string{"1: CHANGES.md", "1: HACKING.md"}},
		{"not a Markdown name", "docs/x.md", "file.mdx, sum.md5 and github.com/a/b/NOTES.md", nil},
		{"quoted sections", "deploy/k8s/base/api.yaml", "# docs/guide.md, \"Probes\"; \"Apply, migrations first\" in docs/guide.md;\n# docs/guide.md (\"Unknown outcomes\")", nil},
		{"a missing quoted section", "deploy/k8s/base/api.yaml", "# docs/guide.md, \"Retention\"",
			[]string{`1: docs/guide.md, "Retention"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range fixtureRepo().Check(tc.file, []byte(tc.text)) {
				got = append(got, fmt.Sprintf("%d: %s", p.Line, p.Ref))
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s:\n%s\ngot  %q\nwant %q", tc.file, tc.text, got, want)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Apply, migrations first":                "apply-migrations-first",
		"Cores for 1,500 and 10,000 charges/s":   "cores-for-1500-and-10000-chargess",
		"Redis Sentinel (F6)":                    "redis-sentinel-f6",
		"F1: worker killed (`TestChaosWorker`)":  "f1-worker-killed-testchaosworker",
		"GatehouseAPIDown":                       "gatehouseapidown",
		"See [the guide](guide.md) now":          "see-the-guide-now",
		"snake_case and dash-case":               "snake_case-and-dash-case",
		"I13: a charge that requires action ...": "i13-a-charge-that-requires-action-",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestScanned(t *testing.T) {
	for name, want := range map[string]bool{
		"internal/x/x.go":                              true,
		"docs/guide.md":                                true,
		"Makefile":                                     true,
		".ci/run":                                      true,
		"deploy/k8s/base/config/api.env":               true,
		"examples/typescript/package-lock.json":        false,
		"internal/e2e/testdata/previous-release":       false,
		"internal/webhooks/testdata/verify/verify.mjs": false,
		"docs/img/challenge.png":                       false,
		"go.sum":                                       false,
	} {
		if got := Scanned(name); got != want {
			t.Errorf("Scanned(%q) = %v, want %v", name, got, want)
		}
	}
	if !strings.HasSuffix(RepoURL, "/") {
		t.Errorf("RepoURL %q does not end in /", RepoURL)
	}
}
