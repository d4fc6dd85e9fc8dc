package k8s_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
)

// The ingress-nginx annotations the api's limits are matched to.
const (
	annBodySize    = "nginx.ingress.kubernetes.io/proxy-body-size"
	annSendTimeout = "nginx.ingress.kubernetes.io/proxy-send-timeout"
	annReadTimeout = "nginx.ingress.kubernetes.io/proxy-read-timeout"
	annBuffering   = "nginx.ingress.kubernetes.io/proxy-buffering"
	annIssuer      = "cert-manager.io/cluster-issuer"
	streamPath     = "/v1/events/stream"
)

// routes reports whether an Ingress path sends requests for path to its backend.
func routes(p networkingv1.HTTPIngressPath, path string) bool {
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return p.Path == path
	}
	prefix := strings.TrimSuffix(p.Path, "/")
	return prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/")
}

// nginxSize reads an nginx size such as 64k or 2m.
func nginxSize(s string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(strings.ToLower(s), "k"):
		mult = 1 << 10
	case strings.HasSuffix(strings.ToLower(s), "m"):
		mult = 1 << 20
	case strings.HasSuffix(strings.ToLower(s), "g"):
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err == nil && n > 0
}

// seconds reads an ingress-nginx timeout annotation (whole seconds).
func seconds(t *testing.T, ing *networkingv1.Ingress, key string) time.Duration {
	t.Helper()
	n, err := strconv.Atoi(ing.Annotations[key])
	if err != nil || n <= 0 {
		t.Errorf("Ingress %s: %s = %q, want a number of seconds", ing.Name, key, ing.Annotations[key])
	}
	return time.Duration(n) * time.Second
}

// checkIngress: only the prod overlay publishes the api, through Ingresses
// with TLS. Every rule routes client paths (never /metrics, /healthz or
// /readyz) to the port of the Service gatehouse-api that targets the
// container port http, never the metrics port. The ingress-nginx limits
// match the api's: the body size lets the api answer oversized bodies in its
// own error body, the timeouts do not cut what the api still allows, and the
// event stream is unbuffered with a read timeout above its heartbeat.
func checkIngress(t *testing.T, m *manifests, w want) {
	ingresses := byKind[*networkingv1.Ingress](m, "Ingress")
	if !w.ingress {
		if len(ingresses) != 0 {
			t.Errorf("%s renders %d Ingresses; only the prod overlay publishes the api", w.dir, len(ingresses))
		}
		return
	}
	if len(ingresses) == 0 {
		t.Fatalf("%s renders no Ingress", w.dir)
	}
	svc, ok := find[*corev1.Service](m, "Service", "gatehouse-api")
	if !ok {
		t.Fatal("Service gatehouse-api not rendered")
	}
	cfg := loadConfig(t, m, w, mustDeployment(t, m, "gatehouse-api").Spec.Template.Spec,
		config.Needs{Database: true, Redis: true, JWT: true, Encryption: true})

	issued := map[string]int{}                   // TLS Secret -> Ingresses asking cert-manager for it
	served := map[string]*networkingv1.Ingress{} // client path -> the Ingress whose rule serves it
	exact := map[string]bool{}                   // paths served by an Exact rule, which nginx prefers
	clientPaths := []string{"/v1/charges", "/v1/tokens", "/dashboard", "/dashboard/login", "/js/v1/gatehouse.js", "/elements/v1/card", streamPath}
	for _, ing := range ingresses {
		if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
			t.Errorf("Ingress %s: ingressClassName %v, want nginx", ing.Name, ing.Spec.IngressClassName)
		}
		if ing.Spec.DefaultBackend != nil {
			t.Errorf("Ingress %s has a default backend: it would route every path, /metrics and /readyz among them", ing.Name)
		}
		tlsHosts := map[string]bool{}
		for _, tls := range ing.Spec.TLS {
			if tls.SecretName == "" {
				t.Errorf("Ingress %s: a TLS entry without secretName", ing.Name)
			}
			if ing.Annotations[annIssuer] != "" {
				issued[tls.SecretName]++
			} else if _, ok := issued[tls.SecretName]; !ok {
				issued[tls.SecretName] = 0
			}
			for _, h := range tls.Hosts {
				tlsHosts[h] = true
			}
		}

		size, ok := nginxSize(ing.Annotations[annBodySize])
		// The api reads up to 32 bodies' worth (readLimit, internal/httpapi/server.go)
		// and answers 413 in its error body; beyond, it refuses unread.
		if !ok || size < httpapi.BodyLimit || size > 32*httpapi.BodyLimit {
			t.Errorf("Ingress %s: %s = %q, want between the api's body limit (%d) and what it reads before refusing (%d)",
				ing.Name, annBodySize, ing.Annotations[annBodySize], httpapi.BodyLimit, 32*httpapi.BodyLimit)
		}
		if send := seconds(t, ing, annSendTimeout); send < cfg.HTTPReadTimeout {
			t.Errorf("Ingress %s: %s %s, below HTTP_READ_TIMEOUT %s", ing.Name, annSendTimeout, send, cfg.HTTPReadTimeout)
		}
		if read := seconds(t, ing, annReadTimeout); read <= cfg.HTTPWriteTimeout {
			t.Errorf("Ingress %s: %s %s, want above HTTP_WRITE_TIMEOUT %s", ing.Name, annReadTimeout, read, cfg.HTTPWriteTimeout)
		}

		for _, r := range ing.Spec.Rules {
			if r.Host == "" || !tlsHosts[r.Host] {
				t.Errorf("Ingress %s: host %q is not covered by its TLS hosts %v", ing.Name, r.Host, tlsHosts)
			}
			if r.HTTP == nil {
				t.Errorf("Ingress %s: a rule without paths", ing.Name)
				continue
			}
			for _, p := range r.HTTP.Paths {
				b := p.Backend.Service
				if b == nil || b.Name != svc.Name {
					t.Errorf("Ingress %s: path %s routes to %+v, want Service %s", ing.Name, p.Path, p.Backend, svc.Name)
					continue
				}
				var target string
				for _, sp := range svc.Spec.Ports {
					if (b.Port.Name != "" && sp.Name == b.Port.Name) || (b.Port.Number != 0 && sp.Port == b.Port.Number) {
						target = sp.TargetPort.String()
					}
				}
				if target != "http" {
					t.Errorf("Ingress %s: path %s routes to Service %s port %+v, which targets %q; want the container port http, never metrics",
						ing.Name, p.Path, svc.Name, b.Port, target)
				}
				for _, op := range []string{"/metrics", "/healthz", "/readyz", "/"} {
					if routes(p, op) {
						t.Errorf("Ingress %s: path %s publishes %s", ing.Name, p.Path, op)
					}
				}
				for _, cp := range clientPaths {
					if !routes(p, cp) || exact[cp] {
						continue
					}
					exact[cp] = p.PathType != nil && *p.PathType == networkingv1.PathTypeExact
					served[cp] = ing
				}
			}
		}
	}
	for secret, n := range issued {
		if n != 1 {
			t.Errorf("TLS Secret %s is requested from cert-manager (%s) by %d Ingresses, want exactly 1", secret, annIssuer, n)
		}
	}
	for _, cp := range clientPaths {
		if served[cp] == nil {
			t.Errorf("no Ingress routes %s", cp)
		}
	}
	if ing := served[streamPath]; ing != nil {
		if !exact[streamPath] {
			t.Errorf("%s is served by a prefix rule of Ingress %s, want an Exact rule of its own", streamPath, ing.Name)
		}
		if ing.Annotations[annBuffering] != "off" {
			t.Errorf("Ingress %s serves %s with %s = %q, want off", ing.Name, streamPath, annBuffering, ing.Annotations[annBuffering])
		}
		if read := seconds(t, ing, annReadTimeout); read < 2*cfg.EventStreamHeartbeat {
			t.Errorf("Ingress %s serves %s with %s %s, want at least two heartbeats (EVENT_STREAM_HEARTBEAT %s)",
				ing.Name, streamPath, annReadTimeout, read, cfg.EventStreamHeartbeat)
		}
	}
}
