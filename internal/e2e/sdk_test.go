package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// flowSteps are the steps examples/go/internal/flow and
// examples/typescript/internal/flow.ts print, in order, as "ok STEP ...".
var flowSteps = []string{
	"login", "create_key", "list_keys", "create_endpoint", "list_endpoints",
	"create_charge", "replay_charge", "captured", "create_refund", "refund_succeeded",
	"list_charges", "get_charge", "list_refunds", "get_refund", "list_events", "get_event",
	"delete_endpoint", "revoke_key", "revoked_refused", "done",
}

// sdk is one generated client: how to generate it from a description into a
// copy of its example directory, and how to build that copy.
type sdk struct {
	name string
	dir  string // examples/go or examples/typescript
	// skip names what the copy leaves out: generated files and installs.
	skip []string
	// generate writes the client generated from spec into the copy.
	generate func(t *testing.T, spec, copy string) (output string, err error)
	// build compiles the copy; the programs are then run by run.
	build func(copy string) (output string, err error)
	// flow and example are the commands that run the built programs.
	flow, example func(copy string) []string
	// broken are the compiler's words for the mutated fields, one of which
	// each of its errors must name.
	broken []string
}

// TestSDKClients is issue 16's test: the clients that oapi-codegen (Go) and
// openapi-typescript with openapi-fetch (TypeScript) generate from the
// current api/openapi.yaml, with their default options, compile and drive
// the whole API against the real binaries through their typed methods only:
// sign in, a key, an endpoint, a charge until captured, a refund, the lists
// and gets, delete, and revoke, after which the key is refused. Each answer
// passes through a proxy that checks it against the description. The
// examples built on those clients (a charge with an Idempotency-Key, then a
// verified webhook) are built and run the same way. A description in which a
// field the flows use is renamed, or changes type, must not compile.
func TestSDKClients(t *testing.T) {
	parallel(t)
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(root, "api", "openapi.yaml")
	clients := []sdk{goSDK(t, root), typescriptSDK(t, root)}

	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: webhooksWorkerEnv}, "generated clients")
	proxy, checked := st.specProxy(t)
	t.Cleanup(func() { // after the subtests: each flow makes 22 calls or more
		if n := checked.Load(); n < 44 {
			t.Errorf("the proxy checked %d answers against the description, want the two flows' 44 or more", n)
		}
	})
	bag := &secretBag{}

	for i, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			copy := c.prepare(t, spec, true)

			t.Run("flow", func(t *testing.T) {
				email := fmt.Sprintf("sdk-%s-%s@example.com", c.name, harness.RandomHex(4))
				password := "correct horse " + harness.RandomHex(8)
				st.createMerchant(t, email, password, "SDK "+c.name)
				receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
				t.Cleanup(receiver.Close)
				out := runProgram(t, copy, c.flow(copy),
					"GATEHOUSE_API="+proxy, "GATEHOUSE_EMAIL="+email, "GATEHOUSE_PASSWORD="+password,
					"GATEHOUSE_WEBHOOK_URL="+receiver.URL+"/webhooks")
				ids := checkSteps(t, out)
				st.checkFlowStored(t, email, password, ids)
			})

			t.Run("example", func(t *testing.T) {
				m := newWebhookMerchant(t, st, bag, fmt.Sprintf("127.0.0.%d", 61+i), "sdk-example-"+c.name)
				listen := testenv.FreeAddr(t)
				_, secret := m.endpoint(t, "http://"+listen+"/webhooks", "charge.created", "charge.captured")
				out := runProgram(t, copy, c.example(copy),
					"GATEHOUSE_API="+proxy, "GATEHOUSE_SECRET_KEY="+m.key,
					"GATEHOUSE_WEBHOOK_SECRET="+secret, "LISTEN_ADDR="+listen)
				if !regexp.MustCompile(`(?m)^verified charge\.captured for charge [0-9a-f-]{36}\b`).MatchString(out) {
					t.Errorf("the example did not verify the charge's webhook:\n%s", out)
				}
				if n := strings.Count(out, "charge "); n < 2 {
					t.Errorf("the example did not show the charge twice (sent again under its Idempotency-Key):\n%s", out)
				}
			})

			t.Run("field_changes_break_it", func(t *testing.T) {
				mutated := filepath.Join(t.TempDir(), "openapi.json")
				mutateSpec(t, spec, mutated)
				broken := c.prepare(t, mutated, false)
				out, err := c.build(broken)
				if err == nil {
					t.Fatalf("the flow compiled against a description in which Charge.amount_captured was renamed and Refund.amount is a string:\n%s", out)
				}
				for _, word := range c.broken {
					if !strings.Contains(out, word) {
						t.Errorf("the compiler's errors do not name %s:\n%s", word, out)
					}
				}
			})
		})
	}
}

// prepare copies the example directory, generates the client from spec into
// the copy and, if build, builds it; it returns the copy.
func (c sdk) prepare(t *testing.T, spec string, build bool) string {
	t.Helper()
	copy := filepath.Join(t.TempDir(), filepath.Base(c.dir))
	copyTree(t, c.dir, copy, c.skip)
	start := time.Now()
	if out, err := c.generate(t, spec, copy); err != nil {
		t.Fatalf("%s: generating the client from %s: %v\n%s", c.name, filepath.Base(spec), err, out)
	}
	generated := time.Since(start)
	if !build {
		return copy
	}
	start = time.Now()
	if out, err := c.build(copy); err != nil {
		t.Fatalf("%s: the generated client or the programs built on it do not compile: %v\n%s", c.name, err, out)
	}
	t.Logf("%s: generated in %s, built in %s", c.name, generated.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return copy
}

// goSDK: oapi-codegen, pinned as a tool in examples/go/go.mod.
func goSDK(t *testing.T, root string) sdk {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	dir := filepath.Join(root, "examples", "go")
	goCmd := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return sdk{
		name: "go",
		dir:  dir,
		skip: []string{"gatehouse/gatehouse.gen.go"},
		generate: func(t *testing.T, spec, copy string) (string, error) {
			// With every default (types, client, an Echo server and the
			// embedded description) it must generate Go that parses.
			all := filepath.Join(t.TempDir(), "all.gen.go")
			if out, err := goCmd(dir, "tool", "oapi-codegen", "-package", "gatehouse", "-o", all, spec); err != nil {
				return out, err
			}
			if _, err := parser.ParseFile(token.NewFileSet(), all, nil, parser.SkipObjectResolution); err != nil {
				return "", fmt.Errorf("oapi-codegen with its defaults made Go that does not parse: %v", err)
			}
			// The client itself: the //go:generate line of examples/go/gatehouse.
			return goCmd(dir, "tool", "oapi-codegen", "-generate", "types,client", "-package", "gatehouse",
				"-o", filepath.Join(copy, "gatehouse", "gatehouse.gen.go"), spec)
		},
		build: func(copy string) (string, error) {
			if out, err := goCmd(copy, "build", "./..."); err != nil { // every type error, where vet stops at the first
				return out, err
			}
			if out, err := goCmd(copy, "vet", "./..."); err != nil {
				return out, err
			}
			if out, err := goCmd(copy, "test", "-count=1", "./..."); err != nil { // the example's webhook verifier
				return out, err
			}
			if out, err := goCmd(copy, "build", "-o", filepath.Join(copy, "bin", "flow"), "./internal/flow"); err != nil {
				return out, err
			}
			return goCmd(copy, "build", "-o", filepath.Join(copy, "bin", "example"), ".")
		},
		flow:    func(copy string) []string { return []string{filepath.Join(copy, "bin", "flow")} },
		example: func(copy string) []string { return []string{filepath.Join(copy, "bin", "example")} },
		broken:  []string{"AmountCaptured", "refund.Amount"},
	}
}

// typescriptSDK: openapi-typescript and openapi-fetch, pinned in
// examples/typescript/package-lock.json and installed by deploy/local/tools.sh.
func typescriptSDK(t *testing.T, root string) sdk {
	dir := filepath.Join(root, "examples", "typescript")
	node := needNodeModule(t, dir, "openapi-fetch")
	nodeCmd := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(node, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return sdk{
		name: "typescript",
		dir:  dir,
		skip: []string{"node_modules", "dist", "gatehouse.d.ts"},
		generate: func(t *testing.T, spec, copy string) (string, error) {
			if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(copy, "node_modules")); err != nil {
				return "", err
			}
			return nodeCmd(copy, filepath.Join("node_modules", "openapi-typescript", "bin", "cli.js"), spec, "-o", "gatehouse.d.ts")
		},
		build: func(copy string) (string, error) {
			return nodeCmd(copy, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".")
		},
		flow:    func(copy string) []string { return []string{node, filepath.Join(copy, "dist", "internal", "flow.js")} },
		example: func(copy string) []string { return []string{node, filepath.Join(copy, "dist", "charge.js")} },
		broken:  []string{"amount_captured", "'string'"},
	}
}

// mutateSpec writes to out the description at in with Charge.amount_captured
// renamed captured_amount and Refund.amount made a string.
func mutateSpec(t *testing.T, in, out string) {
	t.Helper()
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	charge := schemas["Charge"].(map[string]any)
	props := charge["properties"].(map[string]any)
	props["captured_amount"] = props["amount_captured"]
	delete(props, "amount_captured")
	required := charge["required"].([]any)
	i := slices.Index(required, any("amount_captured"))
	if i < 0 {
		t.Fatal("Charge does not require amount_captured")
	}
	required[i] = "captured_amount"
	schemas["Refund"].(map[string]any)["properties"].(map[string]any)["amount"] = map[string]any{"type": "string"}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the files of src to dst, but for the paths in skip.
func copyTree(t *testing.T, src, dst string, skip []string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if slices.Contains(skip, filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// runProgram runs argv in dir with env added, for at most two minutes, and
// returns its standard output; it fails the test if the program fails.
func runProgram(t *testing.T, dir string, argv []string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(argv[len(argv)-1]), err, stdout.String(), stderr.String())
	}
	t.Logf("%s ran in %s", filepath.Base(argv[len(argv)-1]), time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

// checkSteps checks that out holds "ok STEP" for every flow step, in order,
// and returns the first word after each step (the ids the flow made).
func checkSteps(t *testing.T, out string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	var seen []string
	lines := bufio.NewScanner(strings.NewReader(out))
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) < 2 || f[0] != "ok" {
			continue
		}
		seen = append(seen, f[1])
		if len(f) > 2 {
			ids[f[1]] = f[2]
		}
	}
	if !slices.Equal(seen, flowSteps) {
		t.Fatalf("the flow's steps were %v, want %v\n%s", seen, flowSteps, out)
	}
	return ids
}

// checkFlowStored reads back through the raw API, with a key of its own,
// what the flow made: the charge captured and refunded 500, the refund
// succeeded, the endpoint gone and the flow's key revoked.
func (s *stack) checkFlowStored(t *testing.T, email, password string, ids map[string]string) {
	t.Helper()
	c := newClient(t, "127.0.0.60")
	token := s.sessionToken(t, c, email, password)
	k := s.newKey(t, c, token, "check")
	p := &payments{st: s, c: c, key: k.SecretKey}

	ch, _ := p.getCharge(t, ids["create_charge"])
	if ch.Status != "captured" || ch.AmountRefunded != 500 {
		t.Errorf("charge %s: status %s, amount_refunded %d; want captured, 500", ids["create_charge"], ch.Status, ch.AmountRefunded)
	}
	e := p.do(t, http.MethodGet, "/v1/refunds/"+ids["create_refund"], "")
	var refund refundJSON
	decode(t, e, &refund)
	if refund.Status != "succeeded" || refund.Amount != 500 {
		t.Errorf("refund %s: status %s, amount %d; want succeeded, 500", ids["create_refund"], refund.Status, refund.Amount)
	}
	expect(t, p.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+ids["create_endpoint"], ""), http.StatusNotFound, "not_found")
	e = s.do(t, c, http.MethodGet, s.replicas[1]+"/v1/me/api_keys", token, "")
	var keys struct {
		Data []apiKey `json:"data"`
	}
	decode(t, e, &keys)
	i := slices.IndexFunc(keys.Data, func(k apiKey) bool { return k.ID == ids["create_key"] })
	if i < 0 || keys.Data[i].RevokedAt == nil {
		t.Errorf("the flow's key %s is not listed as revoked", ids["create_key"])
	}
}

// specProxy starts a reverse proxy that sends each request to the next API
// replica and checks each answer against api/openapi.yaml; it returns its URL
// and the count of answers checked.
func (s *stack) specProxy(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var targets []*url.URL
	for _, r := range s.replicas {
		u, err := url.Parse(r)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	var n atomic.Uint64
	checked := new(atomic.Int64)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[n.Add(1)%uint64(len(targets))])
		},
		ModifyResponse: func(resp *http.Response) error {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			s.check(t, exchange{req: resp.Request, resp: resp, body: body})
			checked.Add(1)
			return nil
		},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL, checked
}
