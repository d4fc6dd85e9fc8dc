package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gatehouse-pay/gatehouse"

// Domain packages hold the rules; adapters (store, httpapi, jobs, cache,
// ratelimit) carry the libraries below.
var domain = []string{"merchants", "members", "authz", "mfa", "apikeys", "auth", "audit", "charges", "refunds", "customers", "webhooks", "providers", "connectors", "money", "ledger", "reconcile"}

var forbiddenInDomain = []string{
	"github.com/gofiber/fiber",
	"github.com/valyala/fasthttp",
	"github.com/jackc/pgx",
	"github.com/hibiken/asynq",
	"github.com/redis/go-redis",
	"net/http",
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && strings.Contains(string(ee.Stderr), "matched no packages") {
			return nil
		}
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func exists(t *testing.T, pkg string) bool {
	t.Helper()
	return exec.Command("go", "list", pkg).Run() == nil
}

func TestDomainPackagesImportNoAdapters(t *testing.T) {
	checked := 0
	for _, d := range domain {
		pkg := module + "/internal/" + d
		if !exists(t, pkg) {
			continue // not built yet
		}
		checked++
		for _, dep := range deps(t, pkg) {
			for _, bad := range forbiddenInDomain {
				if dep == bad || strings.HasPrefix(dep, bad+"/") {
					t.Errorf("%s imports %s (directly or through another package)", pkg, dep)
				}
			}
			if strings.HasPrefix(dep, module+"/internal/") {
				for _, adapter := range []string{"store", "httpapi", "jobs", "cache", "ratelimit"} {
					if dep == module+"/internal/"+adapter {
						t.Errorf("%s imports the adapter %s", pkg, dep)
					}
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("checked only %d domain packages: the list is stale", checked)
	}
}

// TestResourceIsTheLowestLayer: internal/resource, the shapes of the API's
// bodies, imports the standard library only, so every package may use it.
func TestResourceIsTheLowestLayer(t *testing.T) {
	pkg := module + "/internal/resource"
	list := deps(t, pkg)
	if len(list) == 0 {
		t.Fatalf("%s is missing", pkg)
	}
	for _, dep := range list {
		if dep == pkg {
			continue
		}
		if first, _, _ := strings.Cut(dep, "/"); strings.Contains(first, ".") {
			t.Errorf("%s imports %s (directly or through another package); it may use the standard library only", pkg, dep)
		}
	}
}

func TestNothingImportsCmd(t *testing.T) {
	for _, dep := range deps(t, module+"/internal/...") {
		if strings.HasPrefix(dep, module+"/cmd") {
			t.Errorf("an internal package depends on %s", dep)
		}
	}
}

// TestDetailsLiveInOnePlace: status codes only in httpapi, SQLSTATEs only in
// store, asynq tasks only in jobs (and the commands that wire them), the
// ISO 4217 table only in money.
func TestDetailsLiveInOnePlace(t *testing.T) {
	rules := []struct {
		lib     string
		allowed []string
	}{
		{"github.com/gofiber/fiber/v2", []string{"internal/httpapi"}},
		{"github.com/jackc/pgx/v5", []string{"internal/store", "internal/testenv", "internal/tracing", "cmd/api", "cmd/worker"}},
		{"github.com/hibiken/asynq", []string{"internal/jobs", "cmd/worker", "cmd/api", "cmd/bench"}},
		{"github.com/redis/go-redis/v9", []string{"internal/cache", "internal/ratelimit", "internal/jobs", "internal/testenv", "internal/tracing", "cmd/api", "cmd/worker", "cmd/bench"}},
		{"golang.org/x/text/currency", []string{"internal/money"}},
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		for _, imp := range fields[1:] {
			for _, r := range rules {
				if imp != r.lib && !strings.HasPrefix(imp, r.lib+"/") {
					continue
				}
				ok := false
				for _, a := range r.allowed {
					ok = ok || pkg == a || strings.HasPrefix(pkg, a+"/")
				}
				if !ok {
					t.Errorf("%s imports %s; only %v may", pkg, imp, r.allowed)
				}
			}
		}
	}
}
