package k8s_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gatehouse-pay/gatehouse/internal/config"
)

// composeFile reads docker-compose.yml (anchors and merge keys resolved).
func composeFile(t *testing.T) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]map[string]any `json:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return doc.Services
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

func envOf(svc map[string]any) map[string]string {
	env := map[string]string{}
	switch e := svc["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			s, _ := v.(string)
			env[k] = s
		}
	case []any:
		for _, kv := range strs(e) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	return env
}

// dependsOn returns service -> condition ("service_started" for the short form).
func dependsOn(svc map[string]any) map[string]string {
	out := map[string]string{}
	switch d := svc["depends_on"].(type) {
	case []any:
		for _, s := range strs(d) {
			out[s] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			cond, _ := v.(map[string]any)["condition"].(string)
			out[name] = cond
		}
	}
	return out
}

// portOf returns the port of a listen address such as ":8080".
func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

func TestCompose(t *testing.T) {
	services := composeFile(t)
	apis := []string{"api-1", "api-2"}
	apps := append([]string{"migrate", "worker"}, apis...)
	for _, name := range append(slices.Clone(apps), "postgres", "redis", "prometheus", "grafana") {
		if _, ok := services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// One image, built from the Dockerfile, for every Gatehouse process.
	images := map[string]bool{}
	for _, name := range apps {
		svc := services[name]
		img, _ := svc["image"].(string)
		images[img] = true
		build, _ := svc["build"].(map[string]any)
		if build["context"] != "." || build["dockerfile"] != "Dockerfile" {
			t.Errorf("%s is not built from ./Dockerfile: build %v", name, svc["build"])
		}
	}
	if len(images) != 1 {
		t.Errorf("app services use different images: %v", images)
	}

	needs := map[string]config.Needs{
		"migrate": {Database: true},
		"worker":  {Database: true, Redis: true, Encryption: true},
	}
	for _, name := range apis {
		needs[name] = config.Needs{Database: true, Redis: true, JWT: true, Encryption: true}
	}
	for _, name := range apps {
		env := envOf(services[name])
		checkVariables(t, name, env)
		required := []string{"DATABASE_URL", "ENCRYPTION_KEY"}
		if name != "migrate" {
			required = append(required, "REDIS_URL")
		}
		if strings.HasPrefix(name, "api") {
			required = append(required, "JWT_SECRET")
		}
		for _, k := range required {
			if env[k] == "" {
				t.Errorf("%s: %s is not set", name, k)
			}
		}
		if _, err := config.Load(func(k string) string { return env[k] }, needs[name]); err != nil {
			t.Errorf("%s: the binaries would refuse this environment: %v", name, err)
		}
		for _, k := range []string{"JWT_SECRET", "ADMIN_TOKEN"} {
			if v, ok := env[k]; ok && !strings.Contains(v, "dev-only") {
				t.Errorf("%s: %s does not say it is dev-only", name, k)
			}
		}
	}

	// Migrations first, then the processes that need the schema.
	if got := strs(services["migrate"]["command"]); !slices.Equal(got, []string{"migrate"}) {
		t.Errorf("migrate command %q, want [migrate] (the entrypoint is the api binary)", got)
	}
	if _, ok := services["migrate"]["entrypoint"]; ok {
		t.Error("migrate overrides the entrypoint; `migrate` is a subcommand of the api binary")
	}
	if got := strs(services["worker"]["entrypoint"]); !slices.Equal(got, []string{"/usr/local/bin/worker"}) {
		t.Errorf("worker entrypoint %q, want [/usr/local/bin/worker]", got)
	}
	if r, _ := services["migrate"]["restart"].(string); r != "no" {
		t.Errorf("migrate restart %q, want \"no\" (a one-shot)", r)
	}
	for _, name := range append([]string{"worker"}, apis...) {
		deps := dependsOn(services[name])
		for dep, cond := range map[string]string{"migrate": "service_completed_successfully", "postgres": "service_healthy", "redis": "service_healthy"} {
			if deps[dep] != cond {
				t.Errorf("%s depends on %s with %q, want %q", name, dep, deps[dep], cond)
			}
		}
	}

	// Health checks: the readiness the Kubernetes probes ask (the base
	// Deployments' readinessProbe path), on the api's PROBE_ADDR (outside
	// HTTP_MAX_CONNS) and the worker's METRICS_ADDR.
	base := render(t, "base")
	for _, name := range []string{"postgres", "redis"} {
		hc, _ := services[name]["healthcheck"].(map[string]any)
		if len(strs(hc["test"])) == 0 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	for _, name := range append([]string{"worker"}, apis...) {
		env := envOf(services[name])
		addr, deployment := env["PROBE_ADDR"], "gatehouse-api"
		if name == "worker" {
			addr, deployment = env["METRICS_ADDR"], "gatehouse-worker"
		}
		if addr == "" {
			t.Errorf("%s: no PROBE_ADDR for its healthcheck", name)
		}
		readiness := mustDeployment(t, base, deployment).Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path
		if !strings.HasPrefix(readiness, "/readyz?exclude=") {
			t.Errorf("%s readinessProbe %q excludes nothing", deployment, readiness)
		}
		hc, _ := services[name]["healthcheck"].(map[string]any)
		test := strs(hc["test"])
		want := []string{"CMD", "/usr/local/bin/healthcheck", "http://127.0.0.1:" + portOf(addr) + readiness}
		if !slices.Equal(test, want) {
			t.Errorf("%s healthcheck %q, want %q", name, test, want)
		}
	}

	// Published ports are on loopback only.
	for name, svc := range services {
		for _, p := range strs(svc["ports"]) {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond loopback", name, p)
			}
		}
	}
}

// mounts returns container path -> host path of a service's bind mounts.
func mounts(svc map[string]any) map[string]string {
	out := map[string]string{}
	for _, v := range strs(svc["volumes"]) {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") {
			out[parts[1]] = parts[0]
		}
	}
	return out
}

func TestComposePrometheus(t *testing.T) {
	services := composeFile(t)
	prom := services["prometheus"]
	if img, _ := prom["image"].(string); !strings.HasPrefix(img, "prom/prometheus:") {
		t.Errorf("prometheus image %q, want prom/prometheus:<version>", img)
	}
	if got := mounts(prom)["/etc/prometheus/prometheus.yml"]; got != "./deploy/compose/prometheus.yml" {
		t.Errorf("prometheus.yml mounted from %q, want ./deploy/compose/prometheus.yml", got)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/compose/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	targets := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s", sc.JobName, sc.MetricsPath)
		}
		for _, s := range sc.StaticConfigs {
			targets[sc.JobName] = append(targets[sc.JobName], s.Targets...)
		}
	}
	// The same job names as the Kubernetes Services, which the alerts use.
	want := map[string][]string{"gatehouse-api": nil, "gatehouse-worker": nil}
	for _, name := range []string{"api-1", "api-2"} {
		want["gatehouse-api"] = append(want["gatehouse-api"], name+":"+portOf(envOf(services[name])["HTTP_ADDR"]))
	}
	want["gatehouse-worker"] = []string{"worker:" + portOf(envOf(services["worker"])["METRICS_ADDR"])}
	for job, w := range want {
		got := slices.Clone(targets[job])
		slices.Sort(got)
		if !slices.Equal(got, w) {
			t.Errorf("job %s scrapes %v, want %v", job, got, w)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "config", "prometheus.yml")
}

func TestComposeGrafana(t *testing.T) {
	root := repoRoot(t)
	services := composeFile(t)
	grafana := services["grafana"]
	if img, _ := grafana["image"].(string); !strings.HasPrefix(img, "grafana/grafana:") {
		t.Errorf("grafana image %q, want grafana/grafana:<version>", img)
	}
	m := mounts(grafana)
	for _, kind := range []string{"datasources", "dashboards"} {
		host := m["/etc/grafana/provisioning/"+kind]
		if host != "./deploy/compose/grafana/provisioning/"+kind {
			t.Errorf("provisioning/%s mounted from %q", kind, host)
		}
	}

	var ds struct {
		Datasources []struct {
			Name, Type, URL string
			IsDefault       bool `json:"isDefault"`
		} `json:"datasources"`
	}
	readYAML(t, filepath.Join(root, "deploy/compose/grafana/provisioning/datasources/prometheus.yml"), &ds)
	ok := false
	for _, d := range ds.Datasources {
		ok = ok || (d.Type == "prometheus" && d.IsDefault && d.URL == "http://prometheus:9090")
	}
	if !ok {
		t.Errorf("no default prometheus datasource at http://prometheus:9090: %+v", ds.Datasources)
	}

	var dash struct {
		Providers []struct {
			Type    string `json:"type"`
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	readYAML(t, filepath.Join(root, "deploy/compose/grafana/provisioning/dashboards/gatehouse.yml"), &dash)
	if len(dash.Providers) != 1 || dash.Providers[0].Type != "file" {
		t.Fatalf("want one file dashboard provider, got %+v", dash.Providers)
	}
	dir := dash.Providers[0].Options.Path
	if host := m[dir]; path.Clean(host) != "deploy/k8s/base/dashboards" {
		t.Errorf("the provider reads %s, mounted from %q, want ./deploy/k8s/base/dashboards", dir, host)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy/k8s/base/dashboards/gatehouse.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkDashboardJSON(t, data)
	if home := envOf(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && home != dir+"/gatehouse.json" {
		t.Errorf("home dashboard %s is not the mounted one", home)
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// dockerStage is one FROM ... block of the Dockerfile, continuation lines joined.
type dockerStage struct {
	from         string
	instructions []string
}

func dockerStages(t *testing.T) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cont string
	inHeredoc := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if inHeredoc != "" {
			if strings.TrimSpace(line) == inHeredoc {
				inHeredoc = ""
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		if cont == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if l, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cont += l + " "
			continue
		}
		instr := cont + trimmed
		cont = ""
		if i := strings.Index(instr, "<<"); i >= 0 {
			word := strings.Fields(instr[i+2:])[0]
			inHeredoc = strings.Trim(word, `'"-`)
		}
		keyword, rest, _ := strings.Cut(instr, " ")
		if strings.EqualFold(keyword, "FROM") {
			stages = append(stages, dockerStage{from: rest})
			continue
		}
		if len(stages) == 0 {
			if !strings.EqualFold(keyword, "ARG") {
				t.Fatalf("Dockerfile: %q before the first FROM", instr)
			}
			continue
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, strings.ToUpper(keyword)+" "+rest)
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	stages := dockerStages(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	final := stages[len(stages)-1]
	if strings.Contains(final.from, "golang") {
		t.Errorf("final stage FROM %s carries the Go toolchain", final.from)
	}
	user := ""
	copied := map[string]bool{}
	entrypoint := ""
	for _, in := range final.instructions {
		keyword, rest, _ := strings.Cut(in, " ")
		switch keyword {
		case "USER":
			user = strings.TrimSpace(rest)
		case "COPY":
			fields := strings.Fields(rest)
			if strings.HasPrefix(fields[0], "--from=") {
				copied[fields[len(fields)-1]] = true
			}
		case "ENTRYPOINT":
			entrypoint = rest
		case "RUN":
			t.Errorf("final stage runs %q; the runtime image has no shell", rest)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "root" || uid == "0" {
		t.Errorf("final stage USER %q, want a non-root user", user)
	}
	if uid != "65532" {
		t.Errorf("final stage USER %q, want the numeric 65532 so runAsNonRoot can be verified", user)
	}
	for _, bin := range []string{"/usr/local/bin/api", "/usr/local/bin/worker", "/usr/local/bin/healthcheck"} {
		if !copied[bin] {
			t.Errorf("final stage does not copy %s from the build stage", bin)
		}
	}
	if !strings.Contains(entrypoint, "/usr/local/bin/api") {
		t.Errorf("ENTRYPOINT %s, want the api binary (compose and the Job run `migrate` through it)", entrypoint)
	}
}

// TestDockerignore: the build context keeps what the build needs and drops
// local state.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.Trim(line, "/"))
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd", "internal", "api", "migrations"} {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, need); ok {
				t.Errorf(".dockerignore pattern %q drops %s, which the build needs", p, need)
			}
		}
	}
	for _, drop := range []string{".git", ".dev", "bin", "bench", "worker", "gatehouse", "api/api", "**/*.test", "**/node_modules", "examples"} {
		if !slices.Contains(patterns, drop) {
			t.Errorf(".dockerignore keeps %s in the build context", drop)
		}
	}
}

// TestBuildOutputIgnored: git ignores what builds and tests write (the
// binaries of go build ./cmd/... at the root, bin/, test binaries,
// coverage, node_modules, screenshots), keeps the README's images and the
// sources, and tracks no executable or file over 2 MB.
func TestBuildOutputIgnored(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	ignored := func(path string) bool {
		err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", path).Run()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
			t.Fatalf("git check-ignore %s: %v", path, err)
		}
		return err == nil
	}
	for _, p := range []string{"bench", "worker", "gatehouse", "api/api", "bin/api", "bin/screenshots/dashboard-login.png",
		"internal/e2e/e2e.test", "coverage.out", "coverage.html", "examples/typescript/node_modules/x/index.js", "screenshots/a.png", "shot.png"} {
		if !ignored(p) {
			t.Errorf(".gitignore does not ignore %s", p)
		}
	}
	for _, p := range []string{"api/openapi.yaml", "api/new.yaml", "docs/img/checkout-paid.png", "cmd/worker/main.go", "internal/store/coverage.go"} {
		if ignored(p) {
			t.Errorf(".gitignore ignores %s, which belongs to the sources", p)
		}
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		st, _ := f.Stat()
		f.Close()
		if string(head[:n]) == "\x7fELF" || (st != nil && st.Size() > 2<<20) {
			t.Errorf("%s is tracked: a binary or a file over 2 MB (%d bytes)", name, st.Size())
		}
	}
}
