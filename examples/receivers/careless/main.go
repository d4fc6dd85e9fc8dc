// Command careless is a webhook receiver with the common mistakes, for
// trying gatehouse doctor (docs/webhooks.md): each flag turns one on or off.
// With the default flags it checks nothing at all: it answers 200 to
// anything posted to it, forged, tampered with or replayed.
//
//	-check-signature  verify webhook-signature (default false: accept anything)
//	-check-timestamp  refuse a webhook-timestamp more than 5 minutes away
//	                  (default false: a captured delivery can be replayed)
//	-redirect         answer 308 to /webhooks/ with a trailing slash, as a
//	                  receiver behind a misconfigured proxy or framework does
//	-slow DURATION    do the work before answering, taking DURATION
//
// It never deduplicates: a redelivery is processed again.
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/receivers/careless -listen 127.0.0.1:4244
//	gatehouse doctor http://127.0.0.1:4244/webhooks --secret whsec_...
//
// Do not copy it: examples/receivers/careful is the receiver to start from.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", env("LISTEN_ADDR", "127.0.0.1:4244"), "the address to listen on (LISTEN_ADDR)")
	checkSignature := flag.Bool("check-signature", false, "verify webhook-signature")
	checkTimestamp := flag.Bool("check-timestamp", false, "refuse a webhook-timestamp more than 5 minutes away")
	redirect := flag.Bool("redirect", false, "answer 308 to /webhooks/ (a misconfigured proxy)")
	slow := flag.Duration("slow", 0, "work this long before answering")
	flag.Parse()
	var key []byte
	if *checkSignature {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(os.Getenv("WEBHOOK_SECRET"), "whsec_"))
		if err != nil || len(k) == 0 {
			log.Fatal("set WEBHOOK_SECRET to the endpoint's signing secret (whsec_...)")
		}
		key = k
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}

	handle := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		if key != nil && !signed(key, id, ts, body, r.Header.Get("webhook-signature")) {
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		if *checkTimestamp {
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
				http.Error(w, "stale timestamp", http.StatusBadRequest)
				return
			}
		}
		time.Sleep(*slow) // the work, before the answer
		log.Printf("processing %s %s", r.Header.Get("X-Service-Event-Type"), id)
		w.WriteHeader(http.StatusOK)
	}
	mux := http.NewServeMux()
	if *redirect {
		mux.HandleFunc("POST /webhooks", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/webhooks/", http.StatusPermanentRedirect)
		})
		mux.HandleFunc("POST /webhooks/", handle)
	} else {
		mux.HandleFunc("POST /webhooks", handle)
	}
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

// signed reports whether one of the v1 signatures of webhook-signature matches.
func signed(key []byte, id, ts string, body []byte, signatures string) bool {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := []byte(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	for _, sig := range strings.Fields(signatures) {
		if v, ok := strings.CutPrefix(sig, "v1,"); ok && hmac.Equal([]byte(v), want) {
			return true
		}
	}
	return false
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
