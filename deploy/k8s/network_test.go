package k8s_test

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpoint is one end of a connection: a pod (namespace, labels and the
// ports it names) or an address outside the cluster.
type endpoint struct {
	name      string
	namespace string
	labels    map[string]string
	ports     []corev1.ContainerPort
	addr      netip.Addr
}

func (e endpoint) pod() bool { return e.namespace != "" }

func external(addr string) endpoint {
	return endpoint{name: addr, addr: netip.MustParseAddr(addr)}
}

func podIn(ns string, l map[string]string) endpoint {
	return endpoint{name: fmt.Sprintf("%s/%v", ns, l), namespace: ns, labels: l}
}

// reachable evaluates the NetworkPolicies the way the API defines them: a
// pod selected by any policy of a direction accepts only what one of those
// policies' rules allows in that direction; a connection needs both the
// sender's egress and the receiver's ingress.
func reachable(policies []*networkingv1.NetworkPolicy, from, to endpoint, port int32, proto corev1.Protocol) bool {
	if from.pod() && !allowedBy(policies, networkingv1.PolicyTypeEgress, from, to, to, port, proto) {
		return false
	}
	if to.pod() && !allowedBy(policies, networkingv1.PolicyTypeIngress, to, from, to, port, proto) {
		return false
	}
	return true
}

func allowedBy(policies []*networkingv1.NetworkPolicy, dir networkingv1.PolicyType, subject, peer, dest endpoint, port int32, proto corev1.Protocol) bool {
	isolated := false
	for _, p := range policies {
		if p.Namespace != subject.namespace || !hasType(p, dir) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(subject.labels)) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range p.Spec.Ingress {
				if portsMatch(r.Ports, dest, port, proto) && peersMatch(p, r.From, peer) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if portsMatch(r.Ports, dest, port, proto) && peersMatch(p, r.To, peer) {
					return true
				}
			}
		}
	}
	return !isolated
}

func hasType(p *networkingv1.NetworkPolicy, dir networkingv1.PolicyType) bool {
	if len(p.Spec.PolicyTypes) == 0 {
		return dir == networkingv1.PolicyTypeIngress || (dir == networkingv1.PolicyTypeEgress && len(p.Spec.Egress) > 0)
	}
	for _, t := range p.Spec.PolicyTypes {
		if t == dir {
			return true
		}
	}
	return false
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, dest endpoint, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		want := corev1.ProtocolTCP
		if p.Protocol != nil {
			want = *p.Protocol
		}
		if want != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.Int:
			if p.Port.IntVal == port || (p.EndPort != nil && port >= p.Port.IntVal && port <= *p.EndPort) {
				return true
			}
		default:
			for _, cp := range dest.ports {
				if cp.Name == p.Port.StrVal && cp.ContainerPort == port {
					return true
				}
			}
		}
	}
	return false
}

func peersMatch(p *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, other endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			if !other.pod() && inBlock(peer.IPBlock, other.addr) {
				return true
			}
			continue
		}
		if !other.pod() {
			continue // pod and namespace selectors pick pods only
		}
		nsOK := other.namespace == p.Namespace
		if peer.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			nsOK = err == nil && sel.Matches(labels.Set{"kubernetes.io/metadata.name": other.namespace})
		}
		podOK := true
		if peer.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			podOK = err == nil && sel.Matches(labels.Set(other.labels))
		}
		if nsOK && podOK {
			return true
		}
	}
	return false
}

func inBlock(b *networkingv1.IPBlock, addr netip.Addr) bool {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Contains(addr) {
		return false
	}
	for _, e := range b.Except {
		if ex, err := netip.ParsePrefix(e); err == nil && ex.Contains(addr) {
			return false
		}
	}
	return true
}

func checkNetwork(t *testing.T, m *manifests, w want) {
	policies := byKind[*networkingv1.NetworkPolicy](m, "NetworkPolicy")
	pods := map[string]endpoint{}
	for name, tmpl := range podTemplates(m) {
		var ports []corev1.ContainerPort
		for _, c := range tmpl.Spec.Containers {
			ports = append(ports, c.Ports...)
		}
		pods[name] = endpoint{name: name, namespace: namespace, labels: tmpl.Labels, ports: ports}
	}
	pod := func(name string) endpoint {
		t.Helper()
		p, ok := pods[name]
		if !ok {
			t.Fatalf("no pod template %s", name)
		}
		return p
	}
	api, worker, migrate := pod("Deployment/gatehouse-api"), pod("Deployment/gatehouse-worker"), pod("Job/gatehouse-migrate")
	var (
		ingress    = podIn("ingress-nginx", map[string]string{"app.kubernetes.io/name": "ingress-nginx"})
		prometheus = podIn("monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"})
		stranger   = podIn("default", map[string]string{"app": "curious"})
		stray      = podIn(namespace, map[string]string{"app": "stray"})
		dns        = external("10.96.0.10")
		db         = external("10.20.0.5") // a managed PostgreSQL in the VPC
		cache      = external("10.20.0.6") // a managed Redis
		internet   = external("93.184.216.34")
		internet6  = external("2606:2800:220:1::1")
	)
	const tcp, udp = corev1.ProtocolTCP, corev1.ProtocolUDP
	type conn struct {
		from, to endpoint
		port     int32
		proto    corev1.Protocol
		allow    bool
	}
	conns := []conn{
		{ingress, api, 8080, tcp, true},
		{stranger, api, 8080, tcp, true},
		{prometheus, api, 8080, tcp, true},
		{prometheus, api, 9090, tcp, true}, // API_METRICS_ADDR: Prometheus only
		{ingress, api, 9090, tcp, false},
		{stranger, api, 9090, tcp, false},
		{stray, api, 9090, tcp, false},
		{worker, api, 9090, tcp, false},
		{prometheus, worker, 9091, tcp, true},
		{stranger, worker, 9091, tcp, false},
		{prometheus, worker, 9092, tcp, false}, // the queue UI: port-forward only
		{stranger, migrate, 8080, tcp, false},
		{stranger, stray, 80, tcp, false}, // default deny covers every pod
		{stray, internet, 443, tcp, false},

		{api, dns, 53, udp, true},
		{api, dns, 53, tcp, true},
		{api, db, 5432, tcp, true},
		{api, cache, 6379, tcp, true},
		{api, cache, 26379, tcp, true},
		{api, internet, 443, tcp, false},
		{api, worker, 9091, tcp, false},

		{worker, dns, 53, udp, true},
		{worker, db, 5432, tcp, true},
		{worker, cache, 6379, tcp, true},
		{worker, cache, 26379, tcp, true},
		{worker, internet, 443, tcp, true},  // Stripe, webhooks
		{worker, internet, 8443, tcp, true}, // webhooks on any port
		{worker, internet6, 443, tcp, true},
		{worker, external("169.254.169.254"), 80, tcp, false}, // cloud metadata
		{worker, external("10.1.2.3"), 8080, tcp, false},
		{worker, external("172.20.0.5"), 443, tcp, false},
		{worker, external("192.168.1.10"), 443, tcp, false},
		{worker, external("100.64.1.1"), 443, tcp, false},
		{worker, external("127.0.0.1"), 9092, tcp, false},
		{worker, external("fd00::1"), 443, tcp, false},
		{worker, external("fe80::1"), 443, tcp, false},
		{worker, api, 8080, tcp, false},

		{migrate, dns, 53, udp, true},
		{migrate, db, 5432, tcp, true},
		{migrate, cache, 6379, tcp, false},
		{migrate, internet, 443, tcp, false},
	}
	if w.bundledStores {
		postgres, redis := pod("StatefulSet/postgres"), pod("StatefulSet/redis")
		conns = append(conns,
			conn{api, postgres, 5432, tcp, true},
			conn{api, redis, 6379, tcp, true},
			conn{worker, postgres, 5432, tcp, true},
			conn{worker, redis, 6379, tcp, true},
			conn{migrate, postgres, 5432, tcp, true},
			conn{migrate, redis, 6379, tcp, false},
			conn{stranger, postgres, 5432, tcp, false},
			conn{stranger, redis, 6379, tcp, false},
			conn{postgres, internet, 443, tcp, false},
		)
	}
	for _, c := range conns {
		if got := reachable(policies, c.from, c.to, c.port, c.proto); got != c.allow {
			t.Errorf("%s -> %s:%d/%s allowed=%v, want %v", c.from.name, c.to.name, c.port, c.proto, got, c.allow)
		}
	}
}
