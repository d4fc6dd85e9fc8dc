package k8s_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// probeRow is one row of the probe table of docs/deploy.md.
type probeRow struct {
	component, probe, path, port string
	number                       int32
}

func (r probeRow) String() string {
	return fmt.Sprintf("%s %s GET %s on %s (%d)", r.component, r.probe, r.path, r.port, r.number)
}

// probeTable reads the table of docs/deploy.md whose header is
// "| Component | Probe | Path | Port | What it means |". A port cell is
// "`name` (number)".
func probeTable(t *testing.T) []probeRow {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []probeRow
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case !in && len(cells) == 5 && slices.Equal(cells[:4], []string{"Component", "Probe", "Path", "Port"}):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			if len(cells) != 5 {
				t.Fatalf("docs/deploy.md probe table: row %q has %d cells, want 5", line, len(cells))
			}
			name, num, _ := strings.Cut(cells[3], " ")
			n, err := strconv.Atoi(strings.Trim(num, "()"))
			if err != nil {
				t.Fatalf("docs/deploy.md probe table: port %q, want `name` (number)", cells[3])
			}
			rows = append(rows, probeRow{component: cells[0], probe: cells[1], path: strings.Trim(cells[2], "`"), port: strings.Trim(name, "`"), number: int32(n)})
		case in:
			return rows
		}
	}
	if len(rows) == 0 {
		t.Fatal(`docs/deploy.md has no table "| Component | Probe | Path | Port | What it means |"`)
	}
	return rows
}

// TestProbesDocumented: the probe table of docs/deploy.md and the
// startup, readiness and liveness probes of the rendered Deployments
// (base and both overlays) say the same thing, row for row.
func TestProbesDocumented(t *testing.T) {
	rows := probeTable(t)
	slices.SortFunc(rows, func(a, b probeRow) int { return strings.Compare(a.String(), b.String()) })
	for _, w := range targets {
		t.Run(w.dir, func(t *testing.T) {
			m := render(t, w.dir)
			var got []probeRow
			for _, component := range []string{"api", "worker"} {
				d := mustDeployment(t, m, "gatehouse-"+component)
				ctr := d.Spec.Template.Spec.Containers[0]
				for _, p := range []struct {
					name  string
					probe *corev1.Probe
				}{{"startup", ctr.StartupProbe}, {"readiness", ctr.ReadinessProbe}, {"liveness", ctr.LivenessProbe}} {
					if p.probe == nil || p.probe.HTTPGet == nil {
						t.Errorf("%s has no HTTP %s probe", d.Name, p.name)
						continue
					}
					r := probeRow{component: component, probe: p.name, path: p.probe.HTTPGet.Path, port: p.probe.HTTPGet.Port.String()}
					for _, cp := range ctr.Ports {
						if cp.Name == r.port {
							r.number = cp.ContainerPort
						}
					}
					got = append(got, r)
				}
			}
			slices.SortFunc(got, func(a, b probeRow) int { return strings.Compare(a.String(), b.String()) })
			if !slices.Equal(got, rows) {
				t.Errorf("the Deployments' probes and docs/deploy.md disagree:\nmanifests:\n  %s\ndocs:\n  %s",
					strings.Join(describeProbes(got), "\n  "), strings.Join(describeProbes(rows), "\n  "))
			}
		})
	}
}

func describeProbes(rows []probeRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.String()
	}
	return out
}
