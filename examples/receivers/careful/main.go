// Command careful is a webhook receiver that does what a receiver of
// Gatehouse's deliveries should (docs/webhooks.md), and passes every check
// of gatehouse doctor:
//
//   - it verifies webhook-signature (Standard Webhooks: HMAC-SHA256 over
//     "<webhook-id>.<webhook-timestamp>.<raw body>" with the base64-decoded
//     part of the secret after whsec_, any of the space-separated v1
//     signatures, compared in constant time) before it parses anything, and
//     answers 401 when none matches;
//
//   - it refuses a webhook-timestamp more than 5 minutes from its clock (400),
//     so a captured delivery cannot be replayed later;
//
//   - it answers 200 to a webhook-id it has already accepted without
//     processing the event twice (the gateway redelivers after a failure it
//     could not see the end of);
//
//   - it answers at once and does the work after, on a queue.
//
//     WEBHOOK_SECRET=whsec_... go run ./examples/receivers/careful -listen 127.0.0.1:4243
//     gatehouse doctor http://127.0.0.1:4243/webhooks --secret whsec_...
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tolerance is how far webhook-timestamp may be from this server's clock.
const tolerance = 5 * time.Minute

// maxBody bounds what the receiver reads of a request.
const maxBody = 1 << 20

func main() {
	listen := flag.String("listen", env("LISTEN_ADDR", "127.0.0.1:4243"), "the address to listen on (LISTEN_ADDR)")
	flag.Parse()
	key, err := signingKey(os.Getenv("WEBHOOK_SECRET"))
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	r := &receiver{key: key, seen: map[string]time.Time{}, work: make(chan event, 1024), now: time.Now}
	go r.process()
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", r)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("listening on http://%s/webhooks\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// signingKey is the HMAC key of a whsec_ secret: the base64 after the prefix.
func signingKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New("set WEBHOOK_SECRET to the endpoint's signing secret (whsec_...)")
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, errors.New("WEBHOOK_SECRET is not whsec_ followed by base64")
	}
	return key, nil
}

// event is what the receiver needs of a delivery's body.
type event struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
}

// receiver checks deliveries and queues the new ones. seen holds the
// webhook-ids accepted lately (remember); a real receiver keeps them in its
// database, under a unique constraint, in the transaction that records the
// event's effect.
type receiver struct {
	key   []byte
	mu    sync.Mutex
	seen  map[string]time.Time
	swept time.Time
	work  chan event
	now   func() time.Time
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	// The signature first, over the bytes as received: nothing unverified
	// is parsed or believed, the timestamp included.
	if id == "" || !rc.signed(id, ts, body, r.Header.Get("webhook-signature")) {
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || rc.now().Sub(time.Unix(sec, 0)).Abs() > tolerance {
		http.Error(w, "timestamp too old or too far in the future", http.StatusBadRequest)
		return
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "body is not an event", http.StatusBadRequest)
		return
	}
	if !rc.first(id) {
		w.WriteHeader(http.StatusOK) // a redelivery: already queued once
		return
	}
	select {
	case rc.work <- ev:
		w.WriteHeader(http.StatusOK)
	default:
		rc.forget(id) // the queue is full: let the gateway retry later
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}
}

// signed reports whether one of the v1 signatures matches, in constant time.
func (rc *receiver) signed(id, ts string, body []byte, signatures string) bool {
	m := hmac.New(sha256.New, rc.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := []byte(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	ok := false
	for _, sig := range strings.Fields(signatures) {
		if v, found := strings.CutPrefix(sig, "v1,"); found && hmac.Equal([]byte(v), want) {
			ok = true
		}
	}
	return ok
}

// remember is how long an accepted webhook-id is kept: longer than the
// gateway's retries of one delivery (0s, 5m, 30m, 2h, 24h by default).
const remember = 72 * time.Hour

// first records id and reports whether it had not been seen.
func (rc *receiver) first(id string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := rc.now()
	if now.Sub(rc.swept) > time.Minute {
		for k, at := range rc.seen {
			if now.Sub(at) > remember {
				delete(rc.seen, k)
			}
		}
		rc.swept = now
	}
	if _, ok := rc.seen[id]; ok {
		return false
	}
	rc.seen[id] = now
	return true
}

func (rc *receiver) forget(id string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.seen, id)
}

// process does the work of each event, after its delivery was answered.
func (rc *receiver) process() {
	for ev := range rc.work {
		log.Printf("processing %s %s", ev.EventType, ev.ID)
	}
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
