package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

func (c *cli) listenCommand() *cobra.Command {
	var forward string
	var only []string
	cmd := &cobra.Command{
		Use:   "listen --forward-to URL",
		Short: "Forward your account's events, as they happen, to a local URL, signed like webhook deliveries",
		Long: `listen follows your account's events (GET /v1/events/stream) and POSTs each one to
--forward-to exactly as a webhook endpoint receives it: the same body, the same headers,
and both signatures (X-Service-Signature and webhook-signature), made with a signing
secret printed at start. Verify with that secret as you would in production.

It resumes after a dropped connection from the last event it forwarded.`,
		Args: positional(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if forward == "" {
				return usageError{errors.New("--forward-to is required, e.g. --forward-to http://localhost:3000/webhooks")}
			}
			if !strings.HasPrefix(forward, "http://") && !strings.HasPrefix(forward, "https://") {
				return usageError{fmt.Errorf("--forward-to must be an http:// or https:// URL, not %q", forward)}
			}
			for _, e := range only {
				if !events.Known(e) {
					return usageError{fmt.Errorf("--events: %q is not an event type; one of %s", e, strings.Join(events.Types, ", "))}
				}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.listen(cmd.Context(), cl, forward, only)
		},
	}
	cmd.Flags().StringVar(&forward, "forward-to", "", "the URL to POST each event to")
	cmd.Flags().StringSliceVar(&only, "events", nil, "forward only these event types (comma-separated)")
	return cmd
}

// streamEvent is one event of the stream.
type streamEvent struct {
	id, typ  string
	sequence int
	data     []byte
}

func (c *cli) listen(ctx context.Context, cl *client, forward string, only []string) error {
	secret, err := webhooks.NewSecret()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "Ready. Your webhook signing secret is %s (^C to quit)\n", secret)
	post := &http.Client{Timeout: 10 * time.Second}
	sp := newSpinner(c.errOut, "Waiting for events")
	defer sp.stop()
	last := ""
	failures := 0
	for ctx.Err() == nil {
		err := cl.stream(ctx, last, func(e streamEvent) {
			last = e.id
			if len(only) > 0 && !slices.Contains(only, e.typ) {
				return
			}
			sp.pause()
			c.forward(ctx, post, forward, secret, e)
			sp.resume()
		}, func() { failures = 0; sp.resume() })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			return err // a bad key or a refused stream: reconnecting will not help
		}
		failures++
		wait := min(time.Duration(failures)*time.Second, 10*time.Second)
		sp.pause()
		fmt.Fprintf(c.errOut, "%s  stream interrupted (%v); reconnecting in %s\n", stamp(), err, wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

// forward POSTs one event to the URL as a webhook delivery would be sent.
func (c *cli) forward(ctx context.Context, post *http.Client, url, secret string, e streamEvent) {
	now := time.Now()
	headers, err := webhooks.DeliveryHeaders(e.data, webhooks.Secrets{Current: secret},
		webhooks.AttemptHeaders{EventID: e.id, EventType: e.typ, DeliveryID: ids.NewUUID(), Attempt: 1, Sequence: e.sequence}, now)
	if err != nil {
		fmt.Fprintf(c.errOut, "%s  %s: cannot sign: %v\n", stamp(), e.id, err)
		return
	}
	headers["Content-Type"] = "application/json"
	headers["User-Agent"] = "Gatehouse-CLI/1"
	fmt.Fprintf(c.out, "%s  --> %-17s [%s]\n", stamp(), e.typ, e.id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(e.data))
	if err != nil {
		fmt.Fprintf(c.out, "%s  <-- error: %v\n", stamp(), err)
		return
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := post.Do(req)
	if err != nil {
		fmt.Fprintf(c.out, "%s  <-- error: %v\n", stamp(), err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	fmt.Fprintf(c.out, "%s  <-- [%d] POST %s (%s)\n", stamp(), resp.StatusCode, url, time.Since(now).Round(time.Millisecond))
}

func stamp() string { return time.Now().Format("2006-01-02 15:04:05") }

// stream reads GET /v1/events/stream from after last (from now when empty)
// and calls each for every event, and opened once connected; it returns
// when the stream ends.
func (c *client) stream(ctx context.Context, last string, each func(streamEvent), opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/events/stream", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := (&http.Client{}).Do(req) // no timeout: the stream lasts
	if err != nil {
		return fmt.Errorf("cannot reach the API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return decodeError(resp.StatusCode, raw)
	}
	opened()
	r := bufio.NewReader(resp.Body)
	var e streamEvent
	var data [][]byte
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the stream ended")
			}
			return err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "":
			if len(line) == 0 && e.id != "" { // a blank line ends an event; ":" lines are comments
				e.data = bytes.Join(data, []byte("\n"))
				each(e)
			}
			if len(line) == 0 {
				e, data = streamEvent{}, nil
			}
		case "id":
			e.id = string(value)
		case "event":
			e.typ = string(value)
		case "sequence":
			e.sequence, _ = strconv.Atoi(string(value))
		case "data":
			data = append(data, bytes.Clone(value))
		}
	}
}

// decodeError turns an error answer into an *apiError when it is one.
func decodeError(status int, raw []byte) error {
	var e struct {
		Error apiError `json:"error"`
	}
	if jsonUnmarshal(raw, &e) != nil || e.Error.Code == "" {
		return fmt.Errorf("HTTP %d", status)
	}
	e.Error.Status = status
	return &e.Error
}
