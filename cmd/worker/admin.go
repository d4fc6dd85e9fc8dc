package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"
)

// sharedRedis hands asynq (the scheduler, asynqmon) a client made by
// internal/cache, so they follow REDIS_MODE (single, sentinel or cluster)
// like the queue does.
type sharedRedis struct{ c redis.UniversalClient }

func (s sharedRedis) MakeRedisClient() any { return s.c }

// adminHandler serves the asynq queue UI read-only behind token: only GET
// and HEAD pass (asynqmon's own read-only mode covers its API; this covers
// the rest), and every request must carry the token as a bearer token or as
// the password of HTTP Basic authentication (any user name), so a browser can
// open it.
func adminHandler(queue redis.UniversalClient, token string) http.Handler {
	ui := asynqmon.New(asynqmon.Options{RootPath: "/", RedisConnOpt: sharedRedis{queue}, ReadOnly: true})
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokenMatches(r, want) {
			w.Header().Set("WWW-Authenticate", `Basic realm="gatehouse-admin", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{
				"code": "unauthorized", "message": "The admin token is missing or wrong.", "request_id": w.Header().Get("X-Request-Id"),
			}})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": map[string]string{
				"code": "method_not_allowed", "message": "The queue UI is read-only.", "request_id": w.Header().Get("X-Request-Id"),
			}})
			return
		}
		ui.ServeHTTP(w, r)
	})
}

func tokenMatches(r *http.Request, want [32]byte) bool {
	got := ""
	if scheme, b, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		got = b
	} else if _, p, ok := r.BasicAuth(); ok {
		got = p
	}
	if got == "" {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}
