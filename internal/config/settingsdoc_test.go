package config

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/settings.md from the declarations of Config")

// settingsDoc is the generated reference of every setting.
var settingsDoc = filepath.Join("..", "..", "docs", "settings.md")

// regenerate is the command that rewrites docs/settings.md.
const regenerate = "go generate ./internal/config (or make settings-doc)"

// TestSettingsDoc: docs/settings.md is what the declarations of Config
// generate; with -update it rewrites the file instead.
func TestSettingsDoc(t *testing.T) {
	got, err := settingsMarkdown("config.go")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(settingsDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatalf("%v: generate it with %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < min(len(gl), len(wl)) && gl[line] == wl[line] {
			line++
		}
		t.Fatalf("docs/settings.md is not what internal/config/config.go declares (first difference at line %d); regenerate it with %s", line+1, regenerate)
	}
}

// TestSettingsDocFindsDescriptions: the generator refuses a setting
// without a description.
func TestSettingsDocFindsDescriptions(t *testing.T) {
	src := filepath.Join(t.TempDir(), "config.go")
	orig, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	stripped := strings.Replace(string(orig), "\t// `debug` adds one line per request.\n", "", 1)
	if stripped == string(orig) {
		t.Fatal("LOG_LEVEL's description is not where this test expects it")
	}
	if err := os.WriteFile(src, []byte(stripped), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := settingsMarkdown(src); err == nil || !strings.Contains(err.Error(), "LOG_LEVEL") {
		t.Fatalf("got %v, want an error naming LOG_LEVEL", err)
	}
}

// descriptions reads the doc comment of each field of Config in the source
// file, as one line.
func descriptions(file string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range field.Names {
				out[name.Name] = strings.Join(strings.Fields(field.Doc.Text()), " ")
			}
		}
		return false
	})
	return out, nil
}

// settingsMarkdown renders docs/settings.md: a table per group of settings,
// in the order of their declaration.
func settingsMarkdown(src string) ([]byte, error) {
	desc, err := descriptions(src)
	if err != nil {
		return nil, err
	}
	var groups []string
	for _, s := range settings() {
		if s.Group != "" {
			groups = append(groups, s.Group)
		}
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `# Settings

<!-- Generated from internal/config/config.go by %s: edit the declarations there, not this file. -->

Gatehouse reads its settings from the environment only. A missing or bad value stops
the program at start with one line naming every problem; secret values are never
printed. Each binary and subcommand checks every setting below, whether it uses it
or not, so one environment can serve them all. A blank value counts as unset, and
values are trimmed of the spaces around them%s.

**Read by** names the binaries (api, worker) and the subcommands of `+"`bin/api`"+`
(`+"`migrate`, `merchant create`, `audit verify`"+`) that use a setting. **Takes** is what the
program accepts at start; durations are written as Go writes them (`+"`100ms`, `5s`, `2m`, `24h`"+`).
How to deploy and operate Gatehouse with them is in [docs/operations.md](operations.md).

`, regenerate, verbatim())
	for i, g := range groups {
		if i > 0 {
			b.WriteString(" · ")
		}
		fmt.Fprintf(&b, "[%s](#%s)", g, anchor(g))
	}
	b.WriteString("\n")

	var missing []string
	for _, s := range settings() {
		if s.Group != "" {
			fmt.Fprintf(&b, "\n## %s\n\n| Variable | Read by | Default | Takes | Secret | Meaning |\n|---|---|---|---|---|---|\n", s.Group)
		}
		d := desc[s.Field]
		if d == "" {
			missing = append(missing, s.Name)
		}
		secret := "no"
		if s.secret {
			secret = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", s.Name, readBy(s.By), cell(s.docDefaultText()), cell(s.describe(func(v string) string { return "`" + v + "`" })), secret, cell(d))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: no description (the doc comment of the field)", strings.Join(missing, ", "))
	}

	b.WriteString(`
## Read elsewhere

- ` + "`OTEL_*`" + ` (the api and the worker): OpenTelemetry tracing, off unless an exporter is
  configured; the variables are the OpenTelemetry SDK's, read by internal/tracing. See
  [Tracing](observability.md#tracing).
- ` + "`GOMAXPROCS`, `GOMEMLIMIT`" + `: the Go runtime's; the Kubernetes manifests set ` + "`GOMEMLIMIT`" + `
  below the container's memory limit.
- ` + "`GATEHOUSE_API`, `GATEHOUSE_SECRET_KEY`" + `: the developer CLI ` + "`bin/gatehouse`" + `
  (see the [README](../README.md#receive-webhooks-locally)).
`)
	return b.Bytes(), nil
}

// verbatim names the settings taken as given, not trimmed.
func verbatim() string {
	var names []string
	for _, s := range settings() {
		if s.verbatim {
			names = append(names, "`"+s.Name+"`")
		}
	}
	if len(names) == 0 {
		return ""
	}
	return ", except " + strings.Join(names, " and ")
}

// docDefaultText is the Default cell of the setting.
func (s setting) docDefaultText() string {
	switch {
	case s.docDefault != "":
		return s.docDefault
	case s.hasDefault:
		return "`" + s.Default + "`"
	case s.needs != "":
		return "required"
	case s.with != "":
		return "required with `" + s.with + "`"
	}
	return "empty"
}

// readBy renders the by tag: the binaries plain, the subcommands as code.
func readBy(by []string) string {
	out := make([]string, len(by))
	for i, b := range by {
		if b == "api" || b == "worker" {
			out[i] = b
		} else {
			out[i] = "`" + b + "`"
		}
	}
	return strings.Join(out, ", ")
}

// cell escapes what would break a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// anchor is the fragment GitHub gives a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
