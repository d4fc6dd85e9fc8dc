package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
)

const (
	// refuseWait is how long a connection over the cap may take to begin its
	// request before it is answered anyway; refuseTimeout then bounds writing
	// the answer and reading what the client sent until it closes. A client
	// that neither sends, reads nor closes holds nothing longer than both.
	refuseWait    = time.Second
	refuseTimeout = time.Second
	// maxRefusing bounds the refusals in progress at once; beyond it a
	// connection over the cap is answered and closed at once, from the
	// accepting goroutine.
	maxRefusing = 1024
	// refusalLogEvery spaces the log lines about refused connections; the
	// counter has every one.
	refusalLogEvery = time.Minute
)

// LimitListener returns ln serving at most limit connections at once
// (HTTP_MAX_CONNS). A connection accepted beyond that never reaches the HTTP
// server: as soon as its request begins to arrive (within refuseWait; at
// once while maxRefusing refusals are in progress), and without the request
// being read, it is answered 503 service_unavailable in the contract's error
// body with Retry-After: 1 and Connection: close, and closed. A served connection frees its place when it is closed. Accept
// returns only served connections, and the errors of ln unchanged. m counts
// the open and the refused connections.
func LimitListener(ln net.Listener, limit int, m *metrics.HTTP, log *slog.Logger) *LimitedListener {
	return &LimitedListener{
		Listener: ln,
		limit:    int64(limit),
		m:        m,
		log:      log,
		refusal:  newRefusal(),
		refusing: make(chan struct{}, maxRefusing),
		served:   make(map[*limitedConn]struct{}),
	}
}

// LimitedListener is the listener LimitListener returns.
type LimitedListener struct {
	net.Listener
	limit    int64
	open     atomic.Int64
	m        *metrics.HTTP
	log      *slog.Logger
	refusal  refusal
	refusing chan struct{} // one token per refusal in progress
	lastLog  atomic.Int64  // when a refusal was last logged, Unix nanoseconds

	mu     sync.Mutex
	served map[*limitedConn]struct{} // the served connections still open
}

// Accept waits for the next connection under the cap, refusing those over it.
func (l *LimitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.limit {
			l.m.ConnectionsOpen.Inc()
			lc := &limitedConn{Conn: c, l: l, accepted: time.Now()}
			l.mu.Lock()
			l.served[lc] = struct{}{}
			l.mu.Unlock()
			return lc, nil
		}
		l.open.Add(-1)
		l.refuse(c)
	}
}

// release gives back the place of a served connection that was closed.
func (l *LimitedListener) release(c *limitedConn) {
	l.mu.Lock()
	delete(l.served, c)
	l.mu.Unlock()
	l.open.Add(-1)
	l.m.ConnectionsOpen.Dec()
}

// CloseUnused closes the served connections on which not one byte has
// arrived since they were accepted, at least grace ago, and returns how many
// it closed. The HTTP server waits at shutdown for every connection that is
// not idle between two requests, and it counts a new connection as busy
// from the start: a connection a client opened but never used (a load
// balancer's or an HTTP client's spare) would hold the drain until
// HTTP_READ_TIMEOUT. The drain calls this while it waits.
func (l *LimitedListener) CloseUnused(grace time.Duration) int {
	before := time.Now().Add(-grace)
	var unused []*limitedConn
	l.mu.Lock()
	for c := range l.served {
		if !c.used.Load() && c.accepted.Before(before) {
			unused = append(unused, c)
		}
	}
	l.mu.Unlock()
	for _, c := range unused {
		_ = c.Close()
	}
	return len(unused)
}

// refuse answers c with the 503 and closes it, in a goroutine of its own
// while fewer than maxRefusing are in progress, otherwise at once: the
// answer is a few hundred bytes, which the socket's empty send buffer takes
// without waiting for the client, and the deadline bounds the write anyway.
func (l *LimitedListener) refuse(c net.Conn) {
	l.m.ConnectionsRefused.Inc()
	now := time.Now()
	if last := l.lastLog.Load(); now.UnixNano()-last >= int64(refusalLogEvery) && l.lastLog.CompareAndSwap(last, now.UnixNano()) {
		l.log.Warn("connection refused: HTTP_MAX_CONNS connections are open; "+
			"gatehouse_http_connections_refused_total counts every refusal",
			"max_conns", l.limit, "remote", c.RemoteAddr().String())
	}
	select {
	case l.refusing <- struct{}{}:
		go func() {
			defer func() { <-l.refusing }()
			answer(c, l.refusal.render())
		}()
	default:
		_ = c.SetDeadline(now.Add(refuseTimeout))
		_, _ = c.Write(l.refusal.render())
		_ = c.Close()
	}
}

// answer waits for the client's request to begin, writes msg and closes c
// so that the client can read it. An answer sent before the request may be
// taken for a stray one and dropped (Go's net/http client does so). The
// write side is closed first, then what the client sent is read and dropped
// until it closes: closing a socket with unread input sends a reset, which
// can destroy the answer before the client reads it.
func answer(c net.Conn, msg []byte) {
	defer c.Close()
	var first [512]byte
	_ = c.SetReadDeadline(time.Now().Add(refuseWait))
	_, _ = c.Read(first[:]) // the first bytes of the request, or the wait is over
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	if _, err := c.Write(msg); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, BodyLimit))
}

// limitedConn is a served connection; closing it frees its place once.
type limitedConn struct {
	net.Conn
	l        *LimitedListener
	accepted time.Time
	used     atomic.Bool // a byte has arrived
	once     sync.Once
}

func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	return n, err
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// refusal is the answer to a connection over the cap, rendered once. Only
// the request id (a UUID, always 36 characters, so the length never changes)
// is written in per connection, where the placeholder stood.
type refusal struct {
	template []byte
	ids      []int // offsets of the request id: the header and the body
}

func newRefusal() refusal {
	placeholder := strings.Repeat("#", len(uuid.Nil.String()))
	ae := apperr.New(apperr.KindUnavailable, apperr.CodeUnavailable,
		"The server has too many open connections. Please retry.")
	status := statusOf[ae.Kind]
	body, err := json.Marshal(presentError(ae, placeholder))
	if err != nil {
		panic(err)
	}
	template := []byte(fmt.Sprintf("HTTP/1.1 %d %s\r\n"+
		"Content-Type: %s\r\n"+
		"Content-Length: %d\r\n"+
		"Retry-After: 1\r\n"+
		"Connection: close\r\n"+
		"%s: %s\r\n"+
		"\r\n%s",
		status, http.StatusText(status), contentTypeJSON, len(body), headerRequestID, placeholder, body))
	r := refusal{template: template}
	for at := 0; ; {
		i := bytes.Index(template[at:], []byte(placeholder))
		if i < 0 {
			break
		}
		r.ids = append(r.ids, at+i)
		at += i + len(placeholder)
	}
	return r
}

// render returns the answer with a fresh request id.
func (r refusal) render() []byte {
	b := bytes.Clone(r.template)
	id := uuid.NewString()
	for _, at := range r.ids {
		copy(b[at:], id)
	}
	return b
}
