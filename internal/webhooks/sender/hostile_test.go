package sender

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer serves TCP on loopback with handle (one goroutine per
// connection) and returns its http:// URL. Connections and the listener are
// closed when the test ends.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// silentListener accepts connections, reads the request and never answers.
func silentListener(t *testing.T) string {
	return rawServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// drip writes s one byte per period until the peer goes away.
func drip(w io.Writer, flush func(), s string, period time.Duration, done <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-time.After(period):
		}
		if _, err := io.WriteString(w, s[i%len(s):i%len(s)+1]); err != nil {
			return
		}
		flush()
	}
}

// gzipMember is one gzip member holding n bytes of 'a'.
func gzipMember(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for i := 0; i < n; i += len(chunk) {
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// measure runs f and returns how far the heap rose above its level before
// f (sampled every few milliseconds) and how many bytes were allocated in all.
func measure(f func()) (peakGrowth, allocated uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, baseTotal := ms.HeapAlloc, ms.TotalAlloc
	var peak atomic.Uint64
	peak.Store(base)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	f()
	close(done)
	<-stopped
	runtime.ReadMemStats(&ms)
	p := max(peak.Load(), ms.HeapAlloc)
	return p - base, ms.TotalAlloc - baseTotal
}

// docs/reliability.md B4: hostile receivers. Every attempt ends within the
// timeout (plus a little slack), and memory stays bounded: nothing is read
// beyond the cap, before or after decompression.
func TestSendSurvivesHostileReceivers(t *testing.T) {
	const (
		timeout = 500 * time.Millisecond
		// slack is room for a loaded machine: what these cases catch
		// without a timeout never ends, or drips for longer.
		slack = 30 * time.Second
		// maxSent bounds what a receiver of an unbounded body gets out before
		// the sender stops reading: the kept body plus both sockets' buffers
		// on loopback, far below the gigabytes a sender that reads on would take.
		maxSent    = 64 << 20
		maxGrowth  = 8 << 20  // bytes the heap may rise during one attempt
		maxAllocs  = 32 << 20 // bytes one attempt may allocate in all
		gigabyte   = 1 << 30
		bombMember = 16 << 20 // inflated bytes per gzip member
	)
	member := gzipMember(t, bombMember)
	if len(member) > 64<<10 {
		t.Fatalf("gzip member is %d bytes; want a small bomb", len(member))
	}
	chunk := bytes.Repeat([]byte("x"), 32<<10)

	// stream writes chunk until n bytes went out (n < 0: forever) or the peer
	// left, adding what went out to streamed.
	var streamed atomic.Int64
	stream := func(w http.ResponseWriter, b []byte, n int) {
		f := w.(http.Flusher)
		for sent := 0; n < 0 || sent < n; sent += len(b) {
			if _, err := w.Write(b); err != nil {
				return
			}
			streamed.Add(int64(len(b)))
			f.Flush()
		}
	}

	cases := []struct {
		name string
		url  func(t *testing.T) string
		// want: OK, the ErrTimeout flag, the status, and the kept body.
		wantOK      bool
		wantTimeout bool
		wantStatus  int
		wantBody    string
	}{
		{
			name: "1 GB body with Content-Length",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(gigabyte))
				stream(w, chunk, gigabyte)
			}),
			wantOK: true, wantStatus: 200, wantBody: strings.Repeat("x", DefaultMaxBody),
		},
		{
			name: "endless chunked stream",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(500)
				stream(w, chunk, -1)
			}),
			wantStatus: 500, wantBody: strings.Repeat("x", DefaultMaxBody),
		},
		{
			name: "gzip bomb",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.Header().Set("Content-Type", "text/plain")
				stream(w, member, 64*len(member)) // 1 GiB inflated
			}),
			wantOK: true, wantStatus: 200, wantBody: strings.Repeat("a", DefaultMaxBody),
		},
		{
			name: "endless gzip bomb",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(503)
				stream(w, member, -1)
			}),
			wantStatus: 503, wantBody: strings.Repeat("a", DefaultMaxBody),
		},
		{
			name: "body dripped at 1 byte per second",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				drip(w, w.(http.Flusher).Flush, "ok", time.Second, r.Context().Done())
			}),
			wantTimeout: true, wantStatus: 200,
		},
		{
			name: "status line dripped at 1 byte per second",
			url: raw(t, func(c net.Conn) {
				drip(c, func() {}, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", time.Second, nil)
			}),
			wantTimeout: true,
		},
		{
			name: "headers fast, then endless header lines",
			url: raw(t, func(c net.Conn) {
				line := []byte("X-Junk: " + strings.Repeat("j", 4000) + "\r\n")
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"); err != nil {
					return
				}
				for {
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}),
		},
		{
			name:        "never answers",
			url:         func(t *testing.T) string { return silentListener(t) },
			wantTimeout: true,
		},
		{
			name: "answers headers, never the body",
			url: handler(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "10")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}),
			wantTimeout: true, wantStatus: 200,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			streamed.Store(0)
			s := New(Options{Timeout: timeout, AllowPrivate: true})
			defer s.CloseIdleConnections()
			var res Result
			var took time.Duration
			growth, allocated := measure(func() {
				start := time.Now()
				res = s.Send(context.Background(), Request{URL: url, Body: []byte(`{"id":"evt"}`)})
				took = time.Since(start)
			})
			t.Logf("took %v, heap growth %d KiB, allocated %d KiB, result %+v", took, growth>>10, allocated>>10, Result{StatusCode: res.StatusCode, Err: res.Err, Body: trim(res.Body)})
			if took > timeout+slack {
				t.Errorf("Send took %v, want at most %v", took, timeout+slack)
			}
			if growth > maxGrowth || allocated > maxAllocs {
				t.Errorf("heap grew by %d bytes, %d allocated; want under %d and %d", growth, allocated, maxGrowth, maxAllocs)
			}
			if res.OK() != tc.wantOK || errors.Is(res.Err, ErrTimeout) != tc.wantTimeout || res.StatusCode != tc.wantStatus {
				t.Errorf("Send = %+v: OK %v, timeout %v; want OK %v, timeout %v, status %d", res, res.OK(), errors.Is(res.Err, ErrTimeout), tc.wantOK, tc.wantTimeout, tc.wantStatus)
			}
			if !tc.wantOK && res.Err == nil && res.StatusCode/100 == 2 {
				t.Errorf("a failed attempt without an error: %+v", res)
			}
			if tc.wantBody != "" && res.Body != tc.wantBody {
				t.Errorf("Body = %q, want %q", trim(res.Body), trim(tc.wantBody))
			}
			if len(res.Body) > DefaultMaxBody {
				t.Errorf("Body holds %d bytes, more than MaxBody", len(res.Body))
			}
			// The sender stopped reading: the receiver could not get out
			// more than the buffers hold (checked after the connection closed,
			// when the receiver's writes fail).
			s.CloseIdleConnections()
			if n := streamed.Load(); n > maxSent {
				t.Errorf("the receiver wrote %d MiB before the sender stopped reading, want under %d MiB", n>>20, maxSent>>20)
			}
		})
	}
}

// handler starts an httptest server for h when the case runs.
func handler(_ *testing.T, h http.HandlerFunc) func(t *testing.T) string {
	return func(t *testing.T) string {
		srv := httptest.NewServer(h)
		t.Cleanup(func() {
			srv.CloseClientConnections()
			srv.Close()
		})
		return srv.URL
	}
}

// raw starts a rawServer for handle when the case runs.
func raw(_ *testing.T, handle func(net.Conn)) func(t *testing.T) string {
	return func(t *testing.T) string { return rawServer(t, handle) }
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + strconv.Itoa(len(s)) + " bytes"
	}
	return s
}
