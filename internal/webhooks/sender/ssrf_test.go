package sender

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"testing"
)

// canary is a loopback listener that counts the connections it is given.
type canary struct {
	port string
	hits atomic.Int64
}

// startCanary listens on host (127.0.0.1 or ::1); it returns nil when the
// address family is not available here.
func startCanary(t testing.TB, host string) *canary {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil
	}
	t.Cleanup(func() { ln.Close() })
	c := &canary{}
	_, c.port, _ = net.SplitHostPort(ln.Addr().String())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.hits.Add(1)
			conn.Close()
		}
	}()
	return c
}

// fakeDNS returns a resolver that never leaves loopback: a DNS server on
// 127.0.0.1 that answers every A question with 127.0.0.1 and every AAAA
// question with ::1 (a name rebound to loopback), or with NXDOMAIN when
// loopback is false. /etc/hosts is still read first, as in production.
func fakeDNS(t testing.TB, loopback bool) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], loopback); resp != nil {
				_, _ = pc.WriteTo(resp, addr)
			}
		}
	}()
	server := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", server)
		},
	}
}

// dnsAnswer builds the response to a one-question DNS query (RFC 1035 4.1).
func dnsAnswer(q []byte, loopback bool) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) {
		return nil
	}
	end := i + 5 // root label, QTYPE, QCLASS
	qtype := binary.BigEndian.Uint16(q[i+1:])
	var rdata []byte
	switch qtype {
	case 1: // A
		rdata = net.IPv4(127, 0, 0, 1).To4()
	case 28: // AAAA
		rdata = net.IPv6loopback
	}
	resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
	switch {
	case !loopback:
		resp[3] |= 3 // NXDOMAIN
	case rdata != nil:
		resp[7] = 1 // one answer
		resp = append(resp, 0xc0, 0x0c, q[i+1], q[i+2], 0, 1, 0, 0, 0, 60, 0, byte(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp
}

// docs/reliability.md B3: with private networks not allowed, none of these
// destinations gets a connection, whatever the spelling, and a name that
// resolves to loopback is refused on its resolved address.
func TestSendRefusesPrivateDestinations(t *testing.T) {
	c4 := startCanary(t, "127.0.0.1")
	if c4 == nil {
		t.Fatal("cannot listen on 127.0.0.1")
	}
	c6 := startCanary(t, "::1")
	p4 := c4.port
	p6 := p4 // with no IPv6 loopback the [::1] cases still must fail
	if c6 != nil {
		p6 = c6.port
	}

	// mayNotResolve: names the pure-Go resolver refuses to look up (all-numeric
	// spellings of an IPv4 address); libc would read them as 127.0.0.1.
	cases := []struct {
		url           string
		mayNotResolve bool
	}{
		{url: "http://10.0.0.1/"},
		{url: "http://10.0.0.1:" + p4 + "/"},
		{url: "http://172.16.0.1/"},
		{url: "http://172.31.255.254:8080/"},
		{url: "http://192.168.0.1/"},
		{url: "https://192.168.1.1/"},
		{url: "http://127.0.0.1:" + p4 + "/"},
		{url: "http://127.0.0.2:" + p4 + "/"},
		{url: "http://0.0.0.0:" + p4 + "/"},
		{url: "http://0.0.0.0/"},
		{url: "http://169.254.169.254/latest/meta-data/"},
		{url: "http://169.254.169.254:" + p4 + "/"},
		{url: "http://100.64.0.1/"},
		{url: "http://100.100.100.200/latest/meta-data/"}, // Alibaba metadata, in 100.64/10
		{url: "http://168.63.129.16/"},                    // Azure platform
		{url: "http://[::1]:" + p6 + "/"},
		{url: "http://[::]:" + p6 + "/"},
		{url: "http://[fc00::1]/"},
		{url: "http://[fd00:ec2::254]/latest/meta-data/"}, // AWS metadata over IPv6
		{url: "http://[fe80::1]/"},
		{url: "http://[::ffff:127.0.0.1]:" + p4 + "/"},
		{url: "http://[::ffff:7f00:1]:" + p4 + "/"},
		{url: "http://[::ffff:169.254.169.254]/"},
		{url: "http://[64:ff9b::7f00:1]:" + p4 + "/"}, // NAT64 of 127.0.0.1
		{url: "http://[2002:7f00:1::]:" + p4 + "/"},   // 6to4 of 127.0.0.1
		{url: "http://localhost:" + p4 + "/"},
		{url: "http://LOCALHOST:" + p4 + "/"},
		{url: "http://localhost.:" + p4 + "/"},
		{url: "http://127.1:" + p4 + "/", mayNotResolve: true},
		{url: "http://2130706433:" + p4 + "/", mayNotResolve: true},
		{url: "http://017700000001:" + p4 + "/", mayNotResolve: true},
		{url: "http://0x7f000001:" + p4 + "/"},
		{url: "http://rebound.gatehouse.test:" + p4 + "/"},
		{url: "https://rebound.gatehouse.test:" + p4 + "/"},
		{url: "http://rebound.gatehouse.test/"},
		{url: "http://user:pass@rebound.gatehouse.test:" + p4 + "/"},
	}
	s := newSender(Options{Timeout: roomy}, fakeDNS(t, true))
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			res := s.Send(context.Background(), Request{URL: tc.url, Body: []byte("{}"), Headers: map[string]string{"webhook-id": "evt"}})
			t.Logf("%v", res.Err)
			var dnsErr *net.DNSError
			switch {
			case errors.Is(res.Err, ErrForbiddenDestination):
			case tc.mayNotResolve && errors.As(res.Err, &dnsErr):
			default:
				t.Errorf("Send = %+v, want ErrForbiddenDestination", res)
			}
			if res.OK() || res.StatusCode != 0 {
				t.Errorf("Send = %+v, want no response", res)
			}
		})
	}
	// The production constructor, with the system resolver (localhost is in /etc/hosts).
	for _, u := range []string{"http://localhost:" + p4 + "/", "http://127.0.0.1:" + p4 + "/"} {
		if res := New(Options{Timeout: roomy}).Send(context.Background(), Request{URL: u}); !errors.Is(res.Err, ErrForbiddenDestination) {
			t.Errorf("New().Send(%s) = %+v, want ErrForbiddenDestination", u, res)
		}
	}

	if n := c4.hits.Load(); n != 0 {
		t.Errorf("the 127.0.0.1 canary got %d connections, want 0", n)
	}
	if c6 != nil && c6.hits.Load() != 0 {
		t.Errorf("the [::1] canary got %d connections, want 0", c6.hits.Load())
	}

	// Control: with private networks allowed the same names do reach the
	// canaries, so the zero above is not an accident of the set-up.
	open := newSender(Options{Timeout: roomy, AllowPrivate: true}, fakeDNS(t, true))
	_ = open.Send(context.Background(), Request{URL: "http://rebound.gatehouse.test:" + p4 + "/"})
	_ = open.Send(context.Background(), Request{URL: "http://[::ffff:127.0.0.1]:" + p4 + "/"})
	if c6 != nil {
		_ = open.Send(context.Background(), Request{URL: "http://[::1]:" + p6 + "/"})
		if c6.hits.Load() == 0 {
			t.Error("with AllowPrivate the [::1] canary got no connection: the test proves nothing")
		}
	}
	if c4.hits.Load() < 2 {
		t.Errorf("with AllowPrivate the 127.0.0.1 canary got %d connections, want 2: the test proves nothing", c4.hits.Load())
	}
}

// The guard itself, on addresses no test may dial for real.
func TestDestinationGuard(t *testing.T) {
	guard := destinationGuard()
	allowed := []struct{ network, addr string }{
		{"tcp4", "93.184.216.34:443"},
		{"tcp4", "8.8.8.8:8080"}, // any port
		{"tcp4", "1.1.1.1:80"},
		{"tcp6", "[2606:4700:4700::1111]:443"},
		{"tcp6", "[2a00:1450:4001:80b::200e]:8443"},
	}
	for _, a := range allowed {
		if err := guard(a.network, a.addr, nil); err != nil {
			t.Errorf("guard(%s, %s) = %v, want nil", a.network, a.addr, err)
		}
	}
	denied := []struct{ network, addr string }{
		{"tcp4", "10.1.2.3:443"},
		{"tcp4", "172.16.0.1:443"},
		{"tcp4", "172.31.255.255:443"},
		{"tcp4", "192.168.255.1:443"},
		{"tcp4", "127.0.0.1:443"},
		{"tcp4", "127.255.255.254:443"},
		{"tcp4", "0.0.0.0:443"},
		{"tcp4", "0.1.2.3:443"},
		{"tcp4", "169.254.169.254:80"},
		{"tcp4", "169.254.0.1:443"},
		{"tcp4", "100.64.0.1:443"},
		{"tcp4", "100.127.255.254:443"},
		{"tcp4", "100.100.100.200:80"},
		{"tcp4", "168.63.129.16:80"},
		{"tcp4", "192.0.0.192:80"},
		{"tcp4", "224.0.0.1:443"},
		{"tcp4", "255.255.255.255:443"},
		{"tcp6", "[::1]:443"},
		{"tcp6", "[::]:443"},
		{"tcp6", "[fc00::1]:443"},
		{"tcp6", "[fdff:ffff::1]:443"},
		{"tcp6", "[fd00:ec2::254]:80"},
		{"tcp6", "[fe80::1]:443"},
		{"tcp6", "[febf::1]:443"},
		{"tcp6", "[::ffff:127.0.0.1]:443"},
		{"tcp6", "[::ffff:10.0.0.1]:443"},
		{"tcp6", "[64:ff9b::a9fe:a9fe]:80"},
		{"tcp6", "[2002:a9fe:a9fe::]:80"},
		{"tcp6", "[ff02::1]:443"},
		{"udp4", "93.184.216.34:443"},
		{"tcp4", "not-an-address"},
	}
	for _, d := range denied {
		if err := guard(d.network, d.addr, nil); !errors.Is(err, ErrForbiddenDestination) {
			t.Errorf("guard(%s, %s) = %v, want ErrForbiddenDestination", d.network, d.addr, err)
		}
	}
}
