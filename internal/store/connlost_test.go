package store_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// pgProxy forwards TCP connections to Postgres until it is cut, as a
// server that dies (or fails over) looks to its clients.
type pgProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, addr, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &pgProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut stops accepting and closes every connection it carried.
func (p *pgProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A connection that breaks under a statement is Unavailable (503), not
// Internal: the server was killed or failed over. The pool drops it, and
// once the server answers again the store works without a restart.
func TestConnectionLostIsUnavailable(t *testing.T) {
	db := testenv.NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	p := startProxy(t, "127.0.0.1:0", target)
	u.Host = p.ln.Addr().String()
	ctx := context.Background()
	pool, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := store.New(pool)
	if _, err := s.MerchantByID(ctx, "mer_missing"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("through the proxy: %v, want NotFound", err)
	}

	p.cut()
	if _, err := s.MerchantByID(ctx, "mer_missing"); apperr.KindOf(err) != apperr.KindUnavailable {
		t.Fatalf("connection cut: %v (kind %v), want Unavailable", err, apperr.KindOf(err))
	}

	startProxy(t, u.Host, target)
	if _, err := s.MerchantByID(ctx, "mer_missing"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("server back: %v, want NotFound", err)
	}
}
