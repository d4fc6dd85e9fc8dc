package sender

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// deniedForms spell an address of a range no delivery may reach, from four
// fuzzed bytes: private, loopback, link-local (cloud metadata), shared
// (CGNAT), "this network", unique-local and link-local IPv6, and IPv4
// addresses hidden in IPv6 (mapped, NAT64).
var deniedForms = []func(b, c, d byte) netip.Addr{
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{10, b, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{172, 16 + b%16, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{192, 168, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{127, b, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{169, 254, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{100, 64 + b%64, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{0, b, c, d}) },
	func(b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{168, 63, 129, 16}) },
	func(b, c, d byte) netip.Addr {
		return netip.AddrFrom16([16]byte{0xfc | b&1, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	},
	func(b, c, d byte) netip.Addr {
		return netip.AddrFrom16([16]byte{0xfe, 0x80 | b&0x3f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, c, d})
	},
	func(b, c, d byte) netip.Addr { return netip.IPv6Loopback() },
	func(b, c, d byte) netip.Addr {
		return netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: 10, 13: b, 14: c, 15: d}) // ::ffff:10.b.c.d
	},
	func(b, c, d byte) netip.Addr {
		return netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: 127, 13: b, 14: c, 15: d}) // 64:ff9b::127.b.c.d
	},
}

// FuzzDeniedDestinationReason: a delivery to any address of a denied range,
// written as an IP literal or behind a name that resolves to loopback, in
// any port, never gets a connection (the loopback canary counts none) and
// the merchant is shown only "destination not allowed": neither the name
// nor the address nor the range it fell in, which stay in the operator's
// error.
func FuzzDeniedDestinationReason(f *testing.F) {
	canary := startCanary(f, "127.0.0.1")
	if canary == nil {
		f.Fatal("cannot listen on 127.0.0.1")
	}
	strict := newSender(Options{Timeout: roomy}, fakeDNS(f, true))
	port, _ := strconv.Atoi(canary.port)
	for form := range deniedForms {
		f.Add(uint8(form), byte(0), byte(0), byte(1), uint16(port), "")
	}
	f.Add(uint8(3), byte(0), byte(0), byte(1), uint16(port), "internal.gatehouse.test")
	f.Add(uint8(0), byte(3), byte(0), byte(7), uint16(80), "db.corp")
	f.Fuzz(func(t *testing.T, form uint8, b, c, d byte, port uint16, name string) {
		addr := deniedForms[int(form)%len(deniedForms)](b, c, d)
		host := "[" + addr.String() + "]"
		if addr.Is4() {
			host = addr.String()
		}
		named := name != "" && !strings.ContainsAny(name, "/?#@[]:%\\ \t\r\n\x00") && net.ParseIP(name) == nil && len(name) < 64
		if named {
			host = name // the fake resolver answers every name with loopback
		}
		if port == 0 {
			port = 80
		}
		url := "http://" + host + ":" + strconv.Itoa(int(port)) + "/hook"
		before := canary.hits.Load()
		res := strict.Send(context.Background(), Request{URL: url, Body: []byte("{}")})
		if canary.hits.Load() != before {
			t.Fatalf("%s reached the loopback canary", url)
		}
		if res.Err == nil || res.StatusCode != 0 {
			t.Fatalf("%s: status %d, err %v; want refused", url, res.StatusCode, res.Err)
		}
		reason := Reason(res.Err)
		if named && (reason == ReasonInvalidURL || reason == ReasonDNS) {
			return // a name the URL parser or the resolver refuses: nothing was sent
		}
		if reason != ReasonNotAllowed {
			t.Fatalf("%s: reason %q (operator: %v), want %q", url, reason, res.Err, ReasonNotAllowed)
		}
	})
}
