package k8s_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/config"
)

// unknownVariables are the variables of env that are no setting of
// Gatehouse (docs/settings.md), nor the OpenTelemetry SDK's or the Go
// runtime's.
func unknownVariables(env map[string]string) []string {
	known := map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true}
	for _, v := range config.Variables() {
		known[v] = true
	}
	var out []string
	for k := range env {
		if !known[k] && !strings.HasPrefix(k, "OTEL_") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// checkVariables: a container gets no variable Gatehouse does not read,
// so a misspelt or retired setting is found here instead of being left
// silently at its default.
func checkVariables(t *testing.T, container string, env map[string]string) {
	t.Helper()
	for _, k := range unknownVariables(env) {
		t.Errorf("%s: %s is no setting of Gatehouse (docs/settings.md)", container, k)
	}
}

func TestUnknownVariables(t *testing.T) {
	env := map[string]string{"HTTP_ADDR": ":8080", "OTEL_SERVICE_NAME": "gatehouse-api", "GOMEMLIMIT": "450MiB", "HTTP_MAX_CONN": "10", "RATE_LIMIT": "1/1m"}
	if got := unknownVariables(env); !slices.Equal(got, []string{"HTTP_MAX_CONN", "RATE_LIMIT"}) {
		t.Fatalf("got %v", got)
	}
}
