package e2e

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// silentProxy is a TCP proxy on loopback to one upstream. While cut, it moves
// no byte in either direction and closes nothing: the connections it holds,
// and the new ones it accepts, stay open and silent, as when a server drops
// off the network and its packets vanish. Restored, it forwards again.
type silentProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	resume chan struct{} // closed when restored
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, upstream string) *silentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &silentProxy{ln: ln, resume: make(chan struct{})}
	close(b.resume)
	t.Cleanup(func() {
		ln.Close()
		b.restore()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, down, up)
			b.mu.Unlock()
			go b.pipe(down, up)
			go b.pipe(up, down)
		}
	}()
	return b
}

func (b *silentProxy) addr() string { return b.ln.Addr().String() }

// wait blocks while the proxy is cut.
func (b *silentProxy) wait() {
	b.mu.Lock()
	ch := b.resume
	b.mu.Unlock()
	<-ch
}

// pipe copies src to dst, holding each read until the proxy is restored:
// nothing read during a cut is written before it ends.
func (b *silentProxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		b.wait()
		n, err := src.Read(buf)
		if n > 0 {
			b.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			b.wait()
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}

func (b *silentProxy) cutOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.cut {
		b.cut, b.resume = true, make(chan struct{})
	}
}

func (b *silentProxy) restore() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut {
		b.cut = false
		close(b.resume)
	}
}

// TestPostgresBlackHole: an API replica whose PostgreSQL drops off the
// network (the proxy in front of it goes silent in both directions, and
// closes nothing) answers a request that needs Postgres with the contract's
// 503 service_unavailable within DATABASE_STATEMENT_TIMEOUT, not after TCP
// gives up; so does the next one, which must open a new connection
// (DATABASE_CONNECT_TIMEOUT). Once the network is back, the same requests
// succeed again. At smoke scale the test asserts the answers: 503 before the
// client's own timeout (40 s; TCP would take minutes); the bound of a few
// seconds is asserted at full scale (make chaos), where it runs on its own.
func TestPostgresBlackHole(t *testing.T) {
	chaosParallel(t)
	const statement, connect = 2 * time.Second, 2 * time.Second
	redisPath := testenv.RedisServerPath(t)
	db := testenv.NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	hole := newSilentProxy(t, u.Host)
	u.Host = hole.addr()
	st := startStackWith(t, buildBinaries(t), db, redisPath, testenv.LoadSpec(t), stackOptions{apiEnv: []string{
		"DATABASE_URL=" + u.String(),
		"DATABASE_STATEMENT_TIMEOUT=" + statement.String(),
		"DATABASE_CONNECT_TIMEOUT=" + connect.String(),
	}})
	c := newClient(t, "127.0.0.1")
	c.Timeout = 40 * time.Second
	_, token := st.signUp(t, c, "blackhole", "Black Hole")
	key := st.newKey(t, c, token, "blackhole")
	base := st.replicas[0]
	list := func() exchange {
		return st.do(t, c, http.MethodGet, base+"/v1/charges?limit=1", key.SecretKey, "")
	}
	mustExpect(t, list(), http.StatusOK, "")
	mustExpect(t, list(), http.StatusOK, "") // the key is cached now

	hole.cutOff()
	// A request takes a connection from the pool (idle ones are pinged
	// first, a new one is opened: within statement+connect) and runs its
	// statement (within statement). The first finds pooled connections; the
	// later ones find them dropped and must connect anew. Race-enabled
	// binaries get a margin; TCP would take minutes.
	const margin = 6 * time.Second
	bound := 2*statement + connect + margin
	for i := range 3 {
		e := list()
		t.Logf("request %d with Postgres cut off: %d %s after %s", i+1, e.status(), e.code(), e.elapsed().Round(time.Millisecond))
		mustExpect(t, e, http.StatusServiceUnavailable, "service_unavailable")
		if chaosFull() && e.elapsed() > bound {
			t.Errorf("request %d answered after %s, want within %s", i+1, e.elapsed(), bound)
		}
	}

	hole.restore()
	restored := time.Now()
	for {
		e := list()
		if e.status() == http.StatusOK {
			t.Logf("served again %s after the network came back", time.Since(restored).Round(time.Millisecond))
			break
		}
		mustExpect(t, e, http.StatusServiceUnavailable, "service_unavailable")
		if time.Since(restored) > waitFloor {
			t.Fatalf("still %d %s %s after the network came back", e.status(), e.code(), waitFloor)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
