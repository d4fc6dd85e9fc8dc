// Package k8s_test checks the deployment files of Gatehouse: the kustomize
// base and overlays in this directory (rendered with `kustomize build` and
// decoded strictly into the Kubernetes and Prometheus Operator types), the
// alert rules (promtool), docker-compose.yml, its Prometheus and Grafana
// files, and the Dockerfile.
//
// kustomize (or kubectl) and promtool are required when CI=true or
// GATEHOUSE_REQUIRE_SERVICES=1; otherwise the tests that need them skip.
// make test installs the pinned ones into bin/tools (deploy/local/tools.sh).
package k8s_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gatehouse-pay/gatehouse/internal/config"
)

const (
	namespace  = "gatehouse"
	image      = "ghcr.io/gatehouse-pay/gatehouse"
	secretName = "gatehouse-secrets"
	// runbookBase + "<alert>.md" is an alert's runbook_url; runbookDir holds
	// the files.
	runbookBase = "https://github.com/gatehouse-pay/gatehouse/blob/main/docs/runbooks/"
	runbookDir  = "docs/runbooks"
)

// kinds maps apiVersion/kind to a fresh typed object. A rendered document of
// any other kind fails the tests: add it here, with the checks it needs.
var kinds = map[string]func() any{
	"v1/Namespace":                            func() any { return new(corev1.Namespace) },
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                               func() any { return new(corev1.Secret) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/PersistentVolumeClaim":                func() any { return new(corev1.PersistentVolumeClaim) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                     func() any { return new(appsv1.StatefulSet) },
	"batch/v1/Job":                            func() any { return new(batchv1.Job) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"networking.k8s.io/v1/Ingress":            func() any { return new(networkingv1.Ingress) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(monitoringv1.PrometheusRule) },
}

// object is one rendered document, decoded.
type object struct {
	Kind, Name, Namespace string
	Labels                map[string]string
	Obj                   any            // *appsv1.Deployment, ...
	Raw                   map[string]any // the document as JSON
}

// manifests is one rendering of a kustomization.
type manifests struct {
	dir     string
	objects []object
}

func byKind[T any](m *manifests, kind string) []T {
	var out []T
	for _, o := range m.objects {
		if o.Kind == kind {
			out = append(out, o.Obj.(T))
		}
	}
	return out
}

func find[T any](m *manifests, kind, name string) (T, bool) {
	for _, o := range m.objects {
		if o.Kind == kind && o.Name == name {
			return o.Obj.(T), true
		}
	}
	var zero T
	return zero, false
}

// repoRoot is the Gatehouse checkout: two levels above this package, which
// is a module of its own (deploy/k8s/go.mod).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "api")); err != nil {
		t.Fatalf("%s does not look like the Gatehouse checkout: %v", dir, err)
	}
	return dir
}

// required reports whether a missing tool fails the tests rather than
// skipping them.
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1"
}

// tool finds a program the tests run; it fails the test in CI and skips it
// elsewhere when the program is missing.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if required() {
		t.Fatalf("%s is required (CI=true or GATEHOUSE_REQUIRE_SERVICES=1) but not found (make tools installs it into bin/tools): %v", name, err)
	}
	t.Skipf("%s not found; skipping (set CI=true to make this a failure)", name)
	return ""
}

// kustomizeCommand renders dir with `kustomize build` (the pinned one that
// deploy/local/tools.sh puts in bin/tools), or with `kubectl kustomize` where
// no standalone kustomize is installed.
func kustomizeCommand(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	if kustomize, err := exec.LookPath("kustomize"); err == nil {
		return exec.Command(kustomize, "build", dir)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		return exec.Command(kubectl, "kustomize", dir)
	}
	if required() {
		t.Fatal("kubectl or kustomize is required (CI=true or GATEHOUSE_REQUIRE_SERVICES=1) but neither is on PATH")
	}
	t.Skip("neither kubectl nor kustomize found; skipping (set CI=true to make this a failure)")
	return nil
}

// render runs `kubectl kustomize deploy/k8s/<dir>` and decodes every document.
func render(t *testing.T, dir string) *manifests {
	t.Helper()
	cmd := kustomizeCommand(t, filepath.Join("deploy", "k8s", dir))
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	m := &manifests{dir: dir}
	m.objects = decodeAll(t, out)
	if len(m.objects) == 0 {
		t.Fatalf("%s rendered nothing", dir)
	}
	return m
}

// decodeAll splits a multi-document YAML stream and decodes each document
// strictly into the type its apiVersion and kind name.
func decodeAll(t *testing.T, stream []byte) []object {
	t.Helper()
	var objects []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		objects = append(objects, decode(t, doc))
	}
	return objects
}

func decode(t *testing.T, doc []byte) object {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("YAML to JSON: %v\n%s", err, doc)
	}
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		t.Fatalf("reading apiVersion/kind: %v\n%s", err, doc)
	}
	newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		t.Fatalf("unknown kind %s/%s (%s): add it to the kinds table with its checks", head.APIVersion, head.Kind, head.Metadata.Name)
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		t.Fatalf("%s %s does not decode strictly: %v", head.Kind, head.Metadata.Name, err)
	}
	if dec.More() {
		t.Fatalf("%s %s: trailing data after the object", head.Kind, head.Metadata.Name)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	return object{Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, Labels: head.Metadata.Labels, Obj: obj, Raw: raw}
}

// decodeFile strictly decodes a single-object YAML file of the repository.
func decodeFile[T any](t *testing.T, rel string) T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, data)
	obj, ok := o.Obj.(T)
	if !ok {
		t.Fatalf("%s holds a %s", rel, o.Kind)
	}
	return obj
}

// want is what one kustomization must render.
type want struct {
	dir string
	// hpa: name -> min, max. An HPA's Deployment sets no replicas.
	hpa               map[string][2]int32
	bundledStores     bool // PostgreSQL and Redis run in the namespace
	externalSecret    bool // gatehouse-secrets is created out of band
	placeholderSecret bool // the Secret holds REPLACE_ME values
	zoneSpread        bool
	redisMode         string
	ingress           bool // the api is published through an Ingress with TLS
}

var targets = []want{
	{
		dir:               "base",
		hpa:               map[string][2]int32{"gatehouse-api": {3, 10}, "gatehouse-worker": {2, 10}},
		placeholderSecret: true, redisMode: "single",
	},
	{
		dir:           "overlays/dev",
		hpa:           map[string][2]int32{"gatehouse-api": {1, 2}, "gatehouse-worker": {1, 2}},
		bundledStores: true, redisMode: "single",
	},
	{
		dir:            "overlays/prod",
		hpa:            map[string][2]int32{"gatehouse-api": {3, 20}, "gatehouse-worker": {3, 20}},
		externalSecret: true, zoneSpread: true, redisMode: "sentinel", ingress: true,
	},
}

func TestKustomizations(t *testing.T) {
	for _, w := range targets {
		t.Run(w.dir, func(t *testing.T) {
			m := render(t, w.dir)
			t.Run("metadata", func(t *testing.T) { checkMetadata(t, m) })
			t.Run("workloads", func(t *testing.T) { checkWorkloads(t, m, w) })
			t.Run("pod security", func(t *testing.T) { checkPodSecurity(t, m) })
			t.Run("environment", func(t *testing.T) { checkEnvironment(t, m, w) })
			t.Run("services", func(t *testing.T) { checkServices(t, m) })
			t.Run("autoscaling", func(t *testing.T) { checkAutoscaling(t, m, w) })
			t.Run("disruption budgets", func(t *testing.T) { checkDisruptionBudgets(t, m) })
			t.Run("monitoring", func(t *testing.T) { checkMonitoring(t, m) })
			t.Run("dashboard", func(t *testing.T) { checkDashboard(t, m) })
			t.Run("migration job", func(t *testing.T) { checkMigrationJob(t, m) })
			t.Run("stores", func(t *testing.T) { checkStores(t, m, w) })
			t.Run("network policies", func(t *testing.T) { checkNetwork(t, m, w) })
			t.Run("ingress", func(t *testing.T) { checkIngress(t, m, w) })
		})
	}
}

func checkMetadata(t *testing.T, m *manifests) {
	for _, o := range m.objects {
		if o.Kind == "Namespace" {
			if o.Name != namespace {
				t.Errorf("Namespace %s, want %s", o.Name, namespace)
			}
			continue
		}
		if o.Namespace != namespace {
			t.Errorf("%s %s is in namespace %q, want %q", o.Kind, o.Name, o.Namespace, namespace)
		}
		if got := o.Labels["app.kubernetes.io/part-of"]; got != "gatehouse" {
			t.Errorf("%s %s: label app.kubernetes.io/part-of=%q, want gatehouse", o.Kind, o.Name, got)
		}
		if o.Labels["app.kubernetes.io/name"] == "" {
			t.Errorf("%s %s has no app.kubernetes.io/name label", o.Kind, o.Name)
		}
	}
	for _, c := range []struct{ kind, name, component string }{
		{"Deployment", "gatehouse-api", "api"},
		{"Deployment", "gatehouse-worker", "worker"},
		{"Job", "gatehouse-migrate", "migrate"},
	} {
		found := false
		for _, o := range m.objects {
			if o.Kind == c.kind && o.Name == c.name {
				found = true
				if o.Labels["app.kubernetes.io/name"] != "gatehouse" || o.Labels["app.kubernetes.io/component"] != c.component {
					t.Errorf("%s %s labels %v, want name=gatehouse component=%s", c.kind, c.name, o.Labels, c.component)
				}
			}
		}
		if !found {
			t.Errorf("%s %s not rendered", c.kind, c.name)
		}
	}
}

// appContainer returns the only container of a Gatehouse workload.
func appContainer(t *testing.T, kind, name string, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%s %s has %d containers, want 1", kind, name, len(spec.Containers))
	}
	if len(spec.InitContainers) != 0 {
		t.Errorf("%s %s has init containers", kind, name)
	}
	return spec.Containers[0]
}

func checkWorkloads(t *testing.T, m *manifests, w want) {
	api, ok := find[*appsv1.Deployment](m, "Deployment", "gatehouse-api")
	if !ok {
		t.Fatal("Deployment gatehouse-api not rendered")
	}
	worker, ok := find[*appsv1.Deployment](m, "Deployment", "gatehouse-worker")
	if !ok {
		t.Fatal("Deployment gatehouse-worker not rendered")
	}
	job, ok := find[*batchv1.Job](m, "Job", "gatehouse-migrate")
	if !ok {
		t.Fatal("Job gatehouse-migrate not rendered")
	}

	// Readiness: the api stays in its Service through a Redis outage (it
	// serves safely without Redis) and the worker stays among the endpoints
	// Prometheus scrapes through any outage (it serves no traffic).
	for _, c := range []struct {
		d         *appsv1.Deployment
		command   []string
		port      corev1.ContainerPort // the probes' port
		metrics   corev1.ContainerPort
		readiness string
	}{
		// The api's probes have a port of their own (PROBE_ADDR), outside
		// HTTP_MAX_CONNS: liveness answers while clients fill http.
		{api, []string{"/usr/local/bin/api"}, corev1.ContainerPort{Name: "probes", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}, "/readyz?exclude=redis"},
		{worker, []string{"/usr/local/bin/worker"}, corev1.ContainerPort{Name: "metrics", ContainerPort: 9091, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "metrics", ContainerPort: 9091, Protocol: corev1.ProtocolTCP}, "/readyz?exclude=redis&exclude=postgres"},
	} {
		d := c.d
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select its own pod template %v", d.Name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		spec := d.Spec.Template.Spec
		ctr := appContainer(t, "Deployment", d.Name, spec)
		if !slices.Equal(ctr.Command, c.command) {
			t.Errorf("%s command %q, want %q", d.Name, ctr.Command, c.command)
		}
		for _, p := range []corev1.ContainerPort{c.port, c.metrics} {
			if !slices.Contains(ctr.Ports, p) {
				t.Errorf("%s ports %+v, want %+v among them", d.Name, ctr.Ports, p)
			}
		}
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{
			{"startupProbe", ctr.StartupProbe, "/healthz"},
			{"readinessProbe", ctr.ReadinessProbe, c.readiness},
			{"livenessProbe", ctr.LivenessProbe, "/healthz"},
		} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: %s is not an HTTP probe", d.Name, p.name)
				continue
			}
			if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != c.port.Name {
				t.Errorf("%s: %s GET %s on %s, want %s on %s", d.Name, p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, c.port.Name)
			}
		}
		checkResources(t, d.Name, ctr)
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token; the processes never call the Kubernetes API", d.Name)
		}
		if w.zoneSpread {
			zone := false
			for _, tsc := range spec.TopologySpreadConstraints {
				s, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
				zone = zone || (tsc.TopologyKey == "topology.kubernetes.io/zone" && err == nil && s.Matches(labels.Set(d.Spec.Template.Labels)))
			}
			if !zone {
				t.Errorf("%s is not spread across zones (topologySpreadConstraints on topology.kubernetes.io/zone selecting its pods)", d.Name)
			}
		}
	}

	// One image, one tag, for every Gatehouse process.
	images := map[string]bool{}
	for _, ctr := range []corev1.Container{api.Spec.Template.Spec.Containers[0], worker.Spec.Template.Spec.Containers[0], appContainer(t, "Job", job.Name, job.Spec.Template.Spec)} {
		images[ctr.Image] = true
		name, tag, ok := strings.Cut(ctr.Image, ":")
		if !ok || name != image || tag == "" || tag == "latest" {
			t.Errorf("container %s runs image %q, want %s:<release tag set by kustomize images>", ctr.Name, ctr.Image, image)
		}
	}
	if len(images) != 1 {
		t.Errorf("api, worker and migrate run different images: %v", images)
	}

	// The api drains within the grace period: preStop sleep, then
	// SHUTDOWN_DELAY with readiness false, then SHUTDOWN_TIMEOUT.
	apiCtr := api.Spec.Template.Spec.Containers[0]
	var preStop time.Duration
	if apiCtr.Lifecycle == nil || apiCtr.Lifecycle.PreStop == nil || apiCtr.Lifecycle.PreStop.Sleep == nil {
		t.Error("gatehouse-api has no preStop sleep action (the image has no shell for an exec sleep)")
	} else {
		preStop = time.Duration(apiCtr.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		if preStop < time.Second || preStop > 15*time.Second {
			t.Errorf("gatehouse-api preStop sleeps %s, want a few seconds", preStop)
		}
	}
	// After the drain each process has bounded work left (cmd/api, cmd/worker):
	// the api closes API_METRICS_ADDR (2s), hands buffered tasks to Redis (5s)
	// and flushes traces (5s); the worker closes its listeners (5s) and
	// flushes traces (5s).
	for _, c := range []struct {
		d            *appsv1.Deployment
		needs        config.Needs
		before, tail time.Duration
	}{
		{api, config.Needs{Database: true, Redis: true, JWT: true, Encryption: true}, preStop, 12 * time.Second},
		{worker, config.Needs{Database: true, Redis: true, Encryption: true}, 0, 10 * time.Second},
	} {
		cfg := loadConfig(t, m, w, c.d.Spec.Template.Spec, c.needs)
		grace := c.d.Spec.Template.Spec.TerminationGracePeriodSeconds
		drain := c.before + cfg.ShutdownDelay + cfg.ShutdownTimeout + c.tail
		if grace == nil || *grace <= 30 || time.Duration(*grace)*time.Second <= drain+5*time.Second {
			got := "unset"
			if grace != nil {
				got = strconv.FormatInt(*grace, 10)
			}
			t.Errorf("%s terminationGracePeriodSeconds %s, want above 30 and above preStop + SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + what follows the drain = %s with a margin", c.d.Name, got, drain)
		}
		if c.d.Name == "gatehouse-api" && cfg.ShutdownDelay == 0 {
			t.Error("gatehouse-api has no SHUTDOWN_DELAY: requests racing the endpoint removal would hit a closed listener")
		}
		// Each listen address is the container port of its name.
		addrs := map[string]string{"metrics": cfg.MetricsAddr}
		if c.d.Name == "gatehouse-api" {
			addrs = map[string]string{"http": cfg.HTTPAddr, "metrics": cfg.APIMetricsAddr}
		}
		for name, addr := range addrs {
			if !slices.ContainsFunc(c.d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
				return p.Name == name && strconv.Itoa(int(p.ContainerPort)) == portOf(addr)
			}) {
				t.Errorf("%s listens on %q, which is not its container port %s", c.d.Name, addr, name)
			}
		}
		if c.d.Name == "gatehouse-worker" {
			if cfg.AdminAddr == "" {
				t.Error("gatehouse-worker has no ADMIN_ADDR")
			}
			if host, _, _ := strings.Cut(cfg.AdminAddr, ":"); host != "127.0.0.1" {
				t.Errorf("worker ADMIN_ADDR %q listens beyond loopback; the queue UI is reached by port-forward only", cfg.AdminAddr)
			}
		}
	}
}

func checkResources(t *testing.T, name string, ctr corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := ctr.Resources.Requests[r]
		lim, okLim := ctr.Resources.Limits[r]
		if !okReq || !okLim || req.IsZero() || lim.IsZero() {
			t.Errorf("%s/%s: %s request and limit must both be set", name, ctr.Name, r)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s/%s: %s request %s above limit %s", name, ctr.Name, r, req.String(), lim.String())
		}
	}
	for _, e := range ctr.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		soft, err := parseGoBytes(e.Value)
		limit := ctr.Resources.Limits[corev1.ResourceMemory]
		if err != nil || soft <= 0 || soft >= limit.Value() {
			t.Errorf("%s/%s: GOMEMLIMIT %q must be below the memory limit %s", name, ctr.Name, e.Value, limit.String())
		}
	}
}

// parseGoBytes reads a GOMEMLIMIT value such as 450MiB.
func parseGoBytes(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// podTemplates lists every pod template the rendering creates.
func podTemplates(m *manifests) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for _, d := range byKind[*appsv1.Deployment](m, "Deployment") {
		out["Deployment/"+d.Name] = d.Spec.Template
	}
	for _, s := range byKind[*appsv1.StatefulSet](m, "StatefulSet") {
		out["StatefulSet/"+s.Name] = s.Spec.Template
	}
	for _, j := range byKind[*batchv1.Job](m, "Job") {
		out["Job/"+j.Name] = j.Spec.Template
	}
	return out
}

// checkPodSecurity holds every pod to the "restricted" Pod Security Standard
// the namespace enforces, and the Gatehouse pods to the image's user and a
// read-only root filesystem.
func checkPodSecurity(t *testing.T, m *manifests) {
	ns, ok := find[*corev1.Namespace](m, "Namespace", namespace)
	if !ok || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s does not enforce the restricted Pod Security Standard", namespace)
	}
	for name, tmpl := range podTemplates(m) {
		spec := tmpl.Spec
		pod := spec.SecurityContext
		if pod == nil {
			t.Errorf("%s has no pod securityContext", name)
			pod = &corev1.PodSecurityContext{}
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s uses host namespaces", name)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s mounts hostPath %s", name, v.HostPath.Path)
			}
		}
		gatehouse := tmpl.Labels["app.kubernetes.io/name"] == "gatehouse"
		if gatehouse {
			if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser != 65532 {
				t.Errorf("%s pod securityContext: want runAsNonRoot and runAsUser 65532", name)
			}
			if pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s pod securityContext: want seccompProfile RuntimeDefault", name)
			}
		}
		for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			sc := ctr.SecurityContext
			if sc == nil {
				t.Errorf("%s/%s has no securityContext", name, ctr.Name)
				continue
			}
			nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
			if !nonRoot {
				t.Errorf("%s/%s may run as root", name, ctr.Name)
			}
			if (sc.RunAsUser != nil && *sc.RunAsUser == 0) || (sc.RunAsUser == nil && pod.RunAsUser != nil && *pod.RunAsUser == 0) {
				t.Errorf("%s/%s runs as uid 0", name, ctr.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s/%s: want allowPrivilegeEscalation false", name, ctr.Name)
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s/%s is privileged", name, ctr.Name)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s/%s: want capabilities drop [ALL] and nothing added", name, ctr.Name)
			}
			seccomp := sc.SeccompProfile
			if seccomp == nil {
				seccomp = pod.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s/%s: want seccompProfile RuntimeDefault", name, ctr.Name)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s/%s: want readOnlyRootFilesystem", name, ctr.Name)
			}
			if gatehouse && (sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
				t.Errorf("%s/%s: want runAsNonRoot and runAsUser 65532 on the container", name, ctr.Name)
			}
		}
	}
}

// standIns have the shape of real secret values; they stand for a Secret
// created out of band, or for the template's placeholders.
var standIns = map[string]string{
	"DATABASE_URL":      "postgres://gatehouse:x@db.internal.example:5432/gatehouse?sslmode=verify-full",
	"REDIS_URL":         "redis://:x@sentinel-0:26379?master_name=mymaster&addr=sentinel-1:26379&addr=sentinel-2:26379",
	"JWT_SECRET":        strings.Repeat("j", 48),
	"ENCRYPTION_KEY":    strings.Repeat("ab", 32),
	"ADMIN_TOKEN":       strings.Repeat("a", 48),
	"STRIPE_SECRET_KEY": "",
}

// secretsOf returns the Secrets a pod may read: those rendered, plus for an
// overlay whose Secret is created out of band, the keys of the base template.
func secretsOf(t *testing.T, m *manifests, w want) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, s := range byKind[*corev1.Secret](m, "Secret") {
		data := map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		for k, v := range s.StringData {
			data[k] = v
		}
		out[s.Name] = data
	}
	if w.externalSecret {
		if _, rendered := out[secretName]; rendered {
			t.Errorf("%s renders Secret %s; it is created out of band, and applying a template would overwrite it", w.dir, secretName)
		}
		tmpl := decodeFile[*corev1.Secret](t, "deploy/k8s/base/secret.yaml")
		data := map[string]string{}
		for k := range tmpl.StringData {
			v, ok := standIns[k]
			if !ok {
				t.Errorf("base/secret.yaml has key %s this test has no stand-in for", k)
			}
			data[k] = v
		}
		out[secretName] = data
	}
	return out
}

// resolveEnv returns the environment the first container of spec sees,
// failing on references to ConfigMaps, Secrets or keys that do not exist.
func resolveEnv(t *testing.T, m *manifests, w want, spec corev1.PodSpec) map[string]string {
	t.Helper()
	configMaps := map[string]map[string]string{}
	for _, c := range byKind[*corev1.ConfigMap](m, "ConfigMap") {
		configMaps[c.Name] = c.Data
	}
	secrets := secretsOf(t, m, w)
	ctr := spec.Containers[0]
	env := map[string]string{}
	for _, from := range ctr.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			data, ok := configMaps[from.ConfigMapRef.Name]
			if !ok && (from.ConfigMapRef.Optional == nil || !*from.ConfigMapRef.Optional) {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", ctr.Name, from.ConfigMapRef.Name)
			}
			for k, v := range data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			data, ok := secrets[from.SecretRef.Name]
			if !ok && (from.SecretRef.Optional == nil || !*from.SecretRef.Optional) {
				t.Errorf("%s: envFrom Secret %s does not exist", ctr.Name, from.SecretRef.Name)
			}
			for k, v := range data {
				env[from.Prefix+k] = v
			}
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		var (
			source   map[string]map[string]string
			name     string
			key      string
			optional *bool
		)
		switch {
		case e.ValueFrom.ConfigMapKeyRef != nil:
			source, name, key, optional = configMaps, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key, e.ValueFrom.ConfigMapKeyRef.Optional
		case e.ValueFrom.SecretKeyRef != nil:
			source, name, key, optional = secrets, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, e.ValueFrom.SecretKeyRef.Optional
		default:
			continue // field or resource references
		}
		v, ok := source[name][key]
		if !ok {
			if optional == nil || !*optional {
				t.Errorf("%s: env %s refers to %s key %s, which does not exist", ctr.Name, e.Name, name, key)
			}
			continue
		}
		env[e.Name] = v
	}
	return env
}

// loadConfig runs Gatehouse's own configuration loader on a pod's environment.
func loadConfig(t *testing.T, m *manifests, w want, spec corev1.PodSpec, needs config.Needs) config.Config {
	t.Helper()
	env := resolveEnv(t, m, w, spec)
	cfg, err := config.Load(func(k string) string { return env[k] }, needs)
	if err != nil && !w.placeholderSecret {
		t.Errorf("%s: the binaries would refuse this environment: %v", spec.Containers[0].Name, err)
	}
	if err != nil {
		// The template's placeholders stop the program; check the rest with
		// stand-ins for them.
		for k, v := range env {
			if v == "REPLACE_ME" {
				env[k] = standIns[k]
			}
		}
		cfg, err = config.Load(func(k string) string { return env[k] }, needs)
		if err != nil {
			t.Errorf("%s: settings other than the secrets are invalid: %v", spec.Containers[0].Name, err)
		}
	}
	return cfg
}

func checkEnvironment(t *testing.T, m *manifests, w want) {
	api, _ := find[*appsv1.Deployment](m, "Deployment", "gatehouse-api")
	worker, _ := find[*appsv1.Deployment](m, "Deployment", "gatehouse-worker")
	job, _ := find[*batchv1.Job](m, "Job", "gatehouse-migrate")
	if api == nil || worker == nil || job == nil {
		t.Fatal("a workload is missing")
	}
	for _, c := range []struct {
		name     string
		spec     corev1.PodSpec
		needs    config.Needs
		required []string
		absent   []string
	}{
		{"api", api.Spec.Template.Spec, config.Needs{Database: true, Redis: true, JWT: true, Encryption: true},
			[]string{"DATABASE_URL", "REDIS_URL", "JWT_SECRET", "ENCRYPTION_KEY", "HTTP_ADDR", "API_METRICS_ADDR", "SHUTDOWN_DELAY", "SHUTDOWN_TIMEOUT", "RATE_LIMIT_CHARGES", "RATE_LIMIT_CHARGES_MERCHANT", "RATE_LIMIT_LOGIN", "RATE_LIMIT_DEFAULT", "REDIS_MODE", "LOG_LEVEL", "DEFAULT_PROVIDER", "OTEL_SERVICE_NAME"},
			[]string{"ADMIN_TOKEN", "ADMIN_ADDR"}},
		{"worker", worker.Spec.Template.Spec, config.Needs{Database: true, Redis: true, Encryption: true},
			[]string{"DATABASE_URL", "REDIS_URL", "ENCRYPTION_KEY", "METRICS_ADDR", "ADMIN_ADDR", "ADMIN_TOKEN", "SHUTDOWN_TIMEOUT", "WEBHOOK_TIMEOUT", "WEBHOOK_RETRY_SCHEDULE", "PROVIDER_MERCHANT_SLOTS", "REDIS_MODE", "LOG_LEVEL", "DEFAULT_PROVIDER", "OTEL_SERVICE_NAME"},
			[]string{"JWT_SECRET"}},
		{"migrate", job.Spec.Template.Spec, config.Needs{Database: true},
			[]string{"DATABASE_URL"},
			[]string{"JWT_SECRET", "ENCRYPTION_KEY", "ADMIN_TOKEN", "STRIPE_SECRET_KEY"}},
	} {
		env := resolveEnv(t, m, w, c.spec)
		checkVariables(t, c.name, env)
		for _, k := range c.required {
			if _, ok := env[k]; !ok {
				t.Errorf("%s: %s is not set", c.name, k)
			}
		}
		for _, k := range c.absent {
			if _, ok := env[k]; ok {
				t.Errorf("%s gets %s, which it does not need", c.name, k)
			}
		}
		if got, want := env["OTEL_SERVICE_NAME"], "gatehouse-"+c.name; c.name != "migrate" && got != want {
			t.Errorf("%s: OTEL_SERVICE_NAME %q, want %q", c.name, got, want)
		}
		cfg := loadConfig(t, m, w, c.spec, c.needs)
		if c.name != "migrate" && cfg.RedisMode != w.redisMode {
			t.Errorf("%s: REDIS_MODE %q, want %q", c.name, cfg.RedisMode, w.redisMode)
		}
		if w.placeholderSecret {
			_, err := config.Load(func(k string) string { return env[k] }, c.needs)
			if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
				t.Errorf("%s: the placeholder Secret must stop the program at start, got %v", c.name, err)
			}
		}
	}

	// Secret values: placeholders in the template, dev-only values in dev.
	for name, data := range secretsOf(t, m, w) {
		if name != secretName {
			continue
		}
		for k, v := range data {
			switch {
			case w.placeholderSecret:
				if v != "REPLACE_ME" && !(k == "STRIPE_SECRET_KEY" && v == "") {
					t.Errorf("template Secret key %s holds %q, want REPLACE_ME", k, v)
				}
			case w.bundledStores:
				if k == "JWT_SECRET" || k == "ADMIN_TOKEN" {
					if !strings.Contains(v, "dev-only") {
						t.Errorf("dev Secret %s does not say it is dev-only", k)
					}
				}
			}
		}
	}
}

// selects reports whether a selector (map form) picks a pod template.
func selects(selector map[string]string, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func checkServices(t *testing.T, m *manifests) {
	templates := podTemplates(m)
	for _, svc := range byKind[*corev1.Service](m, "Service") {
		matched := 0
		for name, tmpl := range templates {
			if !selects(svc.Spec.Selector, tmpl.Labels) {
				continue
			}
			matched++
			for _, p := range svc.Spec.Ports {
				if !containerHasPort(tmpl.Spec, p.TargetPort.String(), p.TargetPort.IntValue()) {
					t.Errorf("Service %s port %s targets %s, which %s does not expose", svc.Name, p.Name, p.TargetPort.String(), name)
				}
			}
		}
		if matched != 1 {
			t.Errorf("Service %s selects %d pod templates, want exactly 1", svc.Name, matched)
		}
	}
	api, ok := find[*corev1.Service](m, "Service", "gatehouse-api")
	if !ok || len(api.Spec.Ports) != 2 ||
		api.Spec.Ports[0].Name != "http" || api.Spec.Ports[0].Port != 80 || api.Spec.Ports[0].TargetPort.String() != "http" ||
		api.Spec.Ports[1].Name != "metrics" || api.Spec.Ports[1].Port != 9090 || api.Spec.Ports[1].TargetPort.String() != "metrics" {
		t.Errorf("Service gatehouse-api: want ports http 80 -> http and metrics 9090 -> metrics, got %+v", api)
	}
	worker, ok := find[*corev1.Service](m, "Service", "gatehouse-worker")
	if !ok || len(worker.Spec.Ports) != 1 || worker.Spec.Ports[0].Name != "metrics" {
		t.Errorf("Service gatehouse-worker: want one port named metrics, got %+v", worker)
	}
}

func containerHasPort(spec corev1.PodSpec, name string, number int) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if (number == 0 && p.Name == name) || (number != 0 && int(p.ContainerPort) == number) {
				return true
			}
		}
	}
	return false
}

func checkAutoscaling(t *testing.T, m *manifests, w want) {
	hpas := byKind[*autoscalingv2.HorizontalPodAutoscaler](m, "HorizontalPodAutoscaler")
	if len(hpas) != len(w.hpa) {
		t.Errorf("%d HorizontalPodAutoscalers, want %d", len(hpas), len(w.hpa))
	}
	for _, h := range hpas {
		ref := h.Spec.ScaleTargetRef
		d, ok := find[*appsv1.Deployment](m, "Deployment", ref.Name)
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || !ok {
			t.Errorf("HPA %s targets %s %s/%s, which is not rendered", h.Name, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		bounds, ok := w.hpa[h.Name]
		if !ok {
			t.Errorf("unexpected HPA %s", h.Name)
			continue
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != bounds[0] || h.Spec.MaxReplicas != bounds[1] {
			t.Errorf("HPA %s scales %v..%d, want %d..%d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas, bounds[0], bounds[1])
		}
		// Kubernetes' guidance: a Deployment an HPA scales leaves
		// spec.replicas unset, or every apply resets the HPA's count.
		if r := d.Spec.Replicas; r != nil {
			t.Errorf("Deployment %s sets replicas %d, but HPA %s scales it: leave spec.replicas unset", d.Name, *r, h.Name)
		}
		cpu := false
		for _, metric := range h.Spec.Metrics {
			cpu = cpu || (metric.Type == autoscalingv2.ResourceMetricSourceType && metric.Resource != nil && metric.Resource.Name == corev1.ResourceCPU &&
				metric.Resource.Target.AverageUtilization != nil && *metric.Resource.Target.AverageUtilization > 0)
		}
		if !cpu {
			t.Errorf("HPA %s does not scale on CPU utilisation", h.Name)
		}
		if _, ok := d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !ok {
			t.Errorf("HPA %s scales on CPU but %s requests none", h.Name, d.Name)
		}
	}
}

func checkDisruptionBudgets(t *testing.T, m *manifests) {
	covered := map[string]bool{}
	for _, p := range byKind[*policyv1.PodDisruptionBudget](m, "PodDisruptionBudget") {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PDB %s has no usable selector", p.Name)
			continue
		}
		var matched []*appsv1.Deployment
		for _, d := range byKind[*appsv1.Deployment](m, "Deployment") {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, d)
			}
		}
		if len(matched) != 1 {
			t.Errorf("PDB %s selects %d Deployments, want 1", p.Name, len(matched))
			continue
		}
		covered[matched[0].Name] = true
		// A budget that allows no eviction blocks node drains forever: with
		// the fewest pods the Deployment runs (its HPA's minimum, or its
		// replicas when no HPA scales it).
		replicas := fewestPods(m, matched[0])
		switch {
		case p.Spec.MaxUnavailable != nil:
			if mu := p.Spec.MaxUnavailable; (mu.Type == intstr.Int && mu.IntVal < 1) || mu.String() == "0%" {
				t.Errorf("PDB %s maxUnavailable %s allows no disruption", p.Name, mu.String())
			}
		case p.Spec.MinAvailable != nil:
			if p.Spec.MinAvailable.IntValue() >= replicas {
				t.Errorf("PDB %s minAvailable %s with %d replicas blocks every drain", p.Name, p.Spec.MinAvailable.String(), replicas)
			}
		default:
			t.Errorf("PDB %s sets neither maxUnavailable nor minAvailable", p.Name)
		}
	}
	for _, name := range []string{"gatehouse-api", "gatehouse-worker"} {
		if !covered[name] {
			t.Errorf("no PodDisruptionBudget covers %s", name)
		}
	}
}

func checkMonitoring(t *testing.T, m *manifests) {
	jobs := map[string]bool{}
	for _, sm := range byKind[*monitoringv1.ServiceMonitor](m, "ServiceMonitor") {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("ServiceMonitor %s has no usable selector", sm.Name)
			continue
		}
		var matched []*corev1.Service
		for _, o := range m.objects {
			if svc, ok := o.Obj.(*corev1.Service); ok && sel.Matches(labels.Set(svc.Labels)) {
				matched = append(matched, svc)
			}
		}
		if len(matched) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(matched))
			continue
		}
		svc := matched[0]
		jobs[svc.Name] = true
		if len(sm.Spec.Endpoints) == 0 {
			t.Errorf("ServiceMonitor %s has no endpoints", sm.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			named := false
			for _, p := range svc.Spec.Ports {
				named = named || (ep.Port != "" && p.Name == ep.Port)
				// The metrics ports only: the api's public port does not serve /metrics.
				if ep.Port != "" && p.Name == ep.Port && p.TargetPort.String() != "metrics" {
					t.Errorf("ServiceMonitor %s scrapes Service %s port %s, which targets %s, not the container port metrics", sm.Name, svc.Name, p.Name, p.TargetPort.String())
				}
			}
			if !named {
				t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s does not name", sm.Name, ep.Port, svc.Name)
			}
			if ep.Path != "/metrics" || ep.Interval != "15s" {
				t.Errorf("ServiceMonitor %s scrapes %q every %q, want /metrics every 15s", sm.Name, ep.Path, ep.Interval)
			}
		}
	}
	// The alerts name the jobs; the job label is the scraped Service's name.
	rules, ok := find[*monitoringv1.PrometheusRule](m, "PrometheusRule", "gatehouse")
	if !ok {
		t.Fatal("PrometheusRule gatehouse not rendered")
	}
	exprs := ""
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			exprs += r.Expr.String() + "\n"
		}
	}
	for _, job := range []string{"gatehouse-api", "gatehouse-worker"} {
		if !jobs[job] {
			t.Errorf("no ServiceMonitor scrapes Service %s", job)
		}
		if !strings.Contains(exprs, `job="`+job+`"`) {
			t.Errorf("no alert watches job %q", job)
		}
	}
}

func checkDashboard(t *testing.T, m *manifests) {
	cm, ok := find[*corev1.ConfigMap](m, "ConfigMap", "gatehouse-dashboard")
	if !ok {
		t.Fatal("ConfigMap gatehouse-dashboard not rendered (with a fixed name, so Grafana does not collect copies)")
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard=1", cm.Labels)
	}
	data, ok := cm.Data["gatehouse.json"]
	if !ok {
		t.Fatalf("dashboard ConfigMap keys %v, want gatehouse.json", maps(cm.Data))
	}
	checkDashboardJSON(t, []byte(data))
}

func maps(m map[string]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkDashboardJSON: valid JSON, a datasource variable of type prometheus,
// and every panel and query reaching Prometheus through that variable rather
// than a fixed datasource uid, so the dashboard works in any Grafana.
func checkDashboardJSON(t *testing.T, data []byte) {
	t.Helper()
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	variable := false
	if tmpl, ok := dash["templating"].(map[string]any); ok {
		list, _ := tmpl["list"].([]any)
		for _, v := range list {
			v, _ := v.(map[string]any)
			if v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus" {
				variable = true
			}
		}
	}
	if !variable {
		t.Error(`dashboard has no variable {"name": "datasource", "type": "datasource", "query": "prometheus"}`)
	}
	refs := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if k == "datasource" {
					refs++
					checkDatasourceRef(t, path+"."+k, child)
					continue
				}
				walk(path+"."+k, child)
			}
		case []any:
			for i, child := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), child)
			}
		}
	}
	walk("$", dash)
	if refs == 0 {
		t.Error("dashboard names no datasource at all")
	}
	if s, _ := json.Marshal(dash); !bytes.Contains(s, []byte("gatehouse_")) {
		t.Error("dashboard queries no gatehouse_ metric")
	}
}

func checkDatasourceRef(t *testing.T, path string, v any) {
	t.Helper()
	isVar := func(s string) bool { return s == "${datasource}" || s == "$datasource" }
	switch v := v.(type) {
	case nil:
		// inherits the panel's datasource
	case string:
		if !isVar(v) {
			t.Errorf("%s = %q, want ${datasource}", path, v)
		}
	case map[string]any:
		uid, _ := v["uid"].(string)
		if v["type"] == "grafana" || v["type"] == "datasource" || uid == "-- Grafana --" || uid == "-- Mixed --" || uid == "-- Dashboard --" {
			return // Grafana's built-in sources
		}
		if !isVar(uid) {
			t.Errorf("%s has a fixed datasource uid %q, want ${datasource}", path, uid)
		}
	default:
		t.Errorf("%s has an unexpected datasource %v", path, v)
	}
}

func checkMigrationJob(t *testing.T, m *manifests) {
	job, ok := find[*batchv1.Job](m, "Job", "gatehouse-migrate")
	if !ok {
		t.Fatal("Job gatehouse-migrate not rendered")
	}
	ctr := appContainer(t, "Job", job.Name, job.Spec.Template.Spec)
	if want := []string{"/usr/local/bin/api", "migrate"}; !slices.Equal(append(slices.Clone(ctr.Command), ctr.Args...), want) {
		t.Errorf("migrate runs %q %q, want %q", ctr.Command, ctr.Args, want)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit < 1 || *job.Spec.BackoffLimit > 10 {
		t.Errorf("migrate backoffLimit %v, want a few retries", job.Spec.BackoffLimit)
	}
	if job.Spec.TTLSecondsAfterFinished == nil || *job.Spec.TTLSecondsAfterFinished <= 0 {
		t.Error("migrate has no ttlSecondsAfterFinished: finished Jobs would pile up and block the next apply")
	}
	if job.Spec.ActiveDeadlineSeconds == nil {
		t.Error("migrate has no activeDeadlineSeconds: a hung migration would hold the rollout forever")
	}
	if rp := job.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("migrate restartPolicy %q", rp)
	}
	checkResources(t, job.Name, ctr)
}

func checkStores(t *testing.T, m *manifests, w want) {
	sets := byKind[*appsv1.StatefulSet](m, "StatefulSet")
	var foreign []string
	for _, tmpl := range podTemplates(m) {
		for _, c := range tmpl.Spec.Containers {
			if !strings.HasPrefix(c.Image, image+":") {
				foreign = append(foreign, c.Image)
			}
		}
	}
	slices.Sort(foreign)
	if !w.bundledStores {
		if len(sets) != 0 || len(foreign) != 0 {
			t.Errorf("%s runs its own stores (%d StatefulSets, images %v); it uses managed PostgreSQL and Redis", w.dir, len(sets), foreign)
		}
		return
	}
	if want := []string{"postgres:15", "redis:7"}; !slices.Equal(foreign, want) {
		t.Errorf("other images %v, want %v", foreign, want)
	}
	env := resolveEnv(t, m, w, mustDeployment(t, m, "gatehouse-api").Spec.Template.Spec)
	for _, c := range []struct {
		name, urlVar string
		port         int32
	}{{"postgres", "DATABASE_URL", 5432}, {"redis", "REDIS_URL", 6379}} {
		set, ok := find[*appsv1.StatefulSet](m, "StatefulSet", c.name)
		if !ok {
			t.Errorf("StatefulSet %s not rendered", c.name)
			continue
		}
		if len(set.Spec.VolumeClaimTemplates) != 1 {
			t.Errorf("StatefulSet %s keeps no data on a volume", c.name)
		}
		ctr := set.Spec.Template.Spec.Containers[0]
		if ctr.ReadinessProbe == nil {
			t.Errorf("StatefulSet %s has no readiness probe", c.name)
		}
		checkResources(t, set.Name, ctr)
		svc, ok := find[*corev1.Service](m, "Service", c.name)
		if !ok || !selects(svc.Spec.Selector, set.Spec.Template.Labels) {
			t.Errorf("no Service %s selects StatefulSet %s", c.name, c.name)
			continue
		}
		u, err := url.Parse(env[c.urlVar])
		if err != nil || u.Hostname() != svc.Name || u.Port() != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
			t.Errorf("%s %q does not point at Service %s:%d", c.urlVar, env[c.urlVar], svc.Name, svc.Spec.Ports[0].Port)
		}
	}
	if pw, _ := secretsOf(t, m, w)["postgres"]["POSTGRES_PASSWORD"]; pw == "" || !strings.Contains(env["DATABASE_URL"], ":"+pw+"@") {
		t.Error("DATABASE_URL does not carry the dev PostgreSQL password")
	}
}

func mustDeployment(t *testing.T, m *manifests, name string) *appsv1.Deployment {
	t.Helper()
	d, ok := find[*appsv1.Deployment](m, "Deployment", name)
	if !ok {
		t.Fatalf("Deployment %s not rendered", name)
	}
	return d
}

func TestProdHasMoreResourcesThanBase(t *testing.T) {
	base, prod := render(t, "base"), render(t, "overlays/prod")
	for _, name := range []string{"gatehouse-api", "gatehouse-worker"} {
		b := mustDeployment(t, base, name).Spec.Template.Spec.Containers[0].Resources
		p := mustDeployment(t, prod, name).Spec.Template.Spec.Containers[0].Resources
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			pr, pl, br, bl := p.Requests[r], p.Limits[r], b.Requests[r], b.Limits[r]
			if pr.Cmp(br) <= 0 || pl.Cmp(bl) < 0 {
				t.Errorf("%s %s in prod (%s/%s) is not above base (%s/%s)", name, r, pr.String(), pl.String(), br.String(), bl.String())
			}
		}
	}
}

// fewestPods is the fewest pods d runs: the minimum of the HPA that scales
// it, else its replicas (1 when unset).
func fewestPods(m *manifests, d *appsv1.Deployment) int {
	for _, h := range byKind[*autoscalingv2.HorizontalPodAutoscaler](m, "HorizontalPodAutoscaler") {
		if ref := h.Spec.ScaleTargetRef; ref.Kind == "Deployment" && ref.Name == d.Name && h.Spec.MinReplicas != nil {
			return int(*h.Spec.MinReplicas)
		}
	}
	if d.Spec.Replicas != nil {
		return int(*d.Spec.Replicas)
	}
	return 1
}
