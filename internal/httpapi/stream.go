package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
)

// The event stream (api/openapi.yaml): GET /v1/events/stream
// sends the merchant's events as Server-Sent Events, in commit order, from
// now or from after Last-Event-ID, with a heartbeat comment when there is
// nothing to say. See events.Hub for how any replica serves it.
const (
	// streamBatch is how many events one read sends.
	streamBatch = 100
	// streamWriteWait bounds each write to a slow client.
	streamWriteWait = 10 * time.Second
	// streamRetryMS is the reconnection delay the stream asks of clients.
	streamRetryMS = "2000"
	// streamRetryAfter is the Retry-After, in seconds, of a stream refused
	// over one of its bounds.
	streamRetryAfter = "2"
)

// credentialOf is the credential a stream checks before each read: the
// session or the API key of the request. The route accepts secret keys only
// today; the stream ends on the revocation of either kind.
func credentialOf(p auth.Principal) events.Credential {
	if p.IsSession() {
		return events.Credential{Kind: events.CredentialSession, ID: p.SessionID}
	}
	return events.Credential{Kind: events.CredentialKey, ID: p.KeyID}
}

var errLastEventID = apperr.Invalid("Last-Event-ID",
	"Last-Event-ID must be the id of one of your events of the last 30 days; omit it to start from now.")

func (s *server) eventStream(c *fiber.Ctx) error {
	if s.Stream == nil {
		return apperr.Unavailable(nil)
	}
	p := principal(c)
	ctx := logging.WithRequestID(context.Background(), requestID(c))
	store := s.Stream.Store()
	var cur events.Cursor
	if last := c.Get("Last-Event-ID"); last != "" {
		if !ids.ValidUUID(last) {
			return errLastEventID
		}
		var err error
		if cur, err = store.CursorOf(ctx, p.MerchantID, last); err != nil {
			if apperr.KindOf(err) == apperr.KindNotFound {
				return errLastEventID
			}
			return err
		}
	} else {
		h, err := store.Horizon(ctx)
		if err != nil {
			return err
		}
		cur = events.Cursor{TxID: h}
	}
	cred := credentialOf(p)
	sub, err := s.Stream.Subscribe(p.MerchantID, cred)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindRateLimited {
			// A place frees when one of the caller's streams ends.
			c.Set(fiber.HeaderRetryAfter, streamRetryAfter)
		}
		return err
	}
	c.Set(fiber.HeaderContentType, "text/event-stream; charset=utf-8")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Accel-Buffering", "no") // proxies must pass each event on at once
	conn := c.Context().Conn()
	// The heartbeat (EVENT_STREAM_HEARTBEAT) keeps proxies from closing an
	// idle stream, finds clients that have gone, and reads again in case a
	// wake-up was missed.
	merchant, done, log, heartbeat := p.MerchantID, s.Stream.Done(), s.Log, s.Config.EventStreamHeartbeat
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer sub.Close()
		write := func(parts ...[]byte) bool {
			// The server's write deadline was set once for the response; a
			// stream extends it for each write.
			_ = conn.SetWriteDeadline(time.Now().Add(streamWriteWait))
			for _, b := range parts {
				if _, err := w.Write(b); err != nil {
					return false
				}
			}
			return w.Flush() == nil
		}
		if !write([]byte("retry: " + streamRetryMS + "\n: connected\n\n")) {
			return
		}
		beat := time.NewTicker(heartbeat)
		defer beat.Stop()
		for {
			for {
				evs, next, err := store.After(ctx, merchant, cred, cur, streamBatch)
				if errors.Is(err, events.ErrRevoked) {
					// The response ends; a reconnection gets 401 token_revoked.
					log.InfoContext(ctx, "event stream ended: its credential was revoked", "credential", cred.Kind)
					return
				}
				if err != nil {
					log.WarnContext(ctx, "event stream: read failed; the client resumes with Last-Event-ID", "err", err)
					return
				}
				for _, e := range evs {
					if !write(sseEvent(e)) {
						return
					}
				}
				cur = next
				if len(evs) < streamBatch {
					break
				}
			}
			select {
			case <-sub.Wake:
			case <-beat.C:
				if !write([]byte(": heartbeat\n\n")) {
					return
				}
			case <-done:
				return
			}
		}
	})
	return nil
}

// sseEvent renders one event: its id (the resume point), its type, its
// sequence (a field EventSource ignores; X-Service-Sequence of its webhook
// deliveries) and its body, one data line per line of the body.
func sseEvent(e events.Event) []byte {
	var b bytes.Buffer
	b.WriteString("id: " + e.ID + "\nevent: " + e.Type + "\n")
	if e.Sequence > 0 {
		b.WriteString("sequence: " + strconv.Itoa(e.Sequence) + "\n")
	}
	for _, line := range bytes.Split(e.Body, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}
