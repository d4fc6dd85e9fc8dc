package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// The asynq floor: one asynq task per delivery and a signed POST, nothing
// else. The harness enqueues the tasks on its private Redis, then runs
// "bench webhook-floor" (this binary) as a child process, so that the CPU of
// the floor's worker is read from /proc like bin/worker's. The child is an
// asynq.Server with bin/worker's concurrency and poll interval whose handler
// signs the body as a delivery is signed and POSTs it to the receiver.

const (
	floorTaskType    = "bench:deliver"
	floorQueue       = "bench-floor"
	floorConcurrency = 100                   // the slots of bin/worker's delivery pool
	floorPoll        = 50 * time.Millisecond // bin/worker's TaskCheckInterval
)

// redisAddr is the host:port of the harness's private redis-server.
func (e *environment) redisAddr() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.redisURL, "redis://"), "/0")
}

// asynqFloor enqueues -webhook-count floor tasks per endpoint, runs the floor worker until
// the receiver has had them all (or -webhook-wait passes), and times them
// first to last receipt, with the floor process's and Redis's CPU.
func (e *environment) asynqFloor(ctx context.Context, rc *receiver, body []byte) (whThroughput, error) {
	n := e.o.webhookCount * len(rc.urls)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: e.redisAddr()})
	defer client.Close()
	for i := range n {
		var id [16]byte
		_, _ = rand.Read(id[:])
		payload := []byte(`{"id":"` + hex.EncodeToString(id[:]) + `"}`)
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(floorTaskType, payload), asynq.Queue(floorQueue), asynq.MaxRetry(25)); err != nil {
			return whThroughput{}, fmt.Errorf("enqueue floor task %d: %w", i, err)
		}
	}
	bodyFile := filepath.Join(e.dir, "floor-body.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return whThroughput{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return whThroughput{}, err
	}
	logFile, err := os.Create(filepath.Join(e.dir, "webhook-floor.log"))
	if err != nil {
		return whThroughput{}, err
	}
	defer logFile.Close()
	first := len(rc.floorSince(0))
	cmd := exec.Command(self, "webhook-floor", "-redis", e.redisAddr(), "-url", strings.Join(rc.urls, ","), "-body", bodyFile,
		"-n", strconv.Itoa(n), "-for", e.o.webhookWait.String())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p, err := startProc(cmd)
	if err != nil {
		return whThroughput{}, err
	}
	defer p.stop()
	before := takeSnapshotOf([]int{p.pid()}, e.redis.pid(), e.postmaster, e.dbName)
	for end := time.Now().Add(e.o.webhookWait); len(rc.floorSince(first)) < n && time.Now().Before(end) && ctx.Err() == nil; {
		select {
		case <-p.exited:
			return whThroughput{}, errors.New("the floor worker exited early (see webhook-floor.log)")
		case <-time.After(20 * time.Millisecond):
		}
	}
	after := takeSnapshotOf([]int{p.pid()}, e.redis.pid(), e.postmaster, e.dbName)
	at := rc.floorSince(first)
	t := whThroughput{Name: "floor: asynq task + signed POST", Senders: floorConcurrency, Expected: n, Got: len(at)}
	if len(at) > 1 {
		t.Wall = at[len(at)-1].Sub(at[0])
		if t.Wall > 0 {
			t.Rate = float64(len(at)-1) / t.Wall.Seconds()
		}
	}
	if t.Got > 0 {
		c := cpuBetween(before, after, t.Got)
		t.Worker, t.PG, t.Redis, t.CPU = c.Server, c.Postgres, c.Redis, true
	}
	return t, nil
}

// serveWebhookFloor is "bench webhook-floor": the floor's worker process.
func serveWebhookFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("webhook-floor", flag.ContinueOnError)
	redisAddr := fs.String("redis", "", "host:port of the Redis holding the floor's tasks")
	url := fs.String("url", "", "the receiver's URLs, comma-separated, posted to in turn")
	bodyFile := fs.String("body", "", "file with the body to sign and POST")
	n := fs.Int("n", 0, "tasks to run before exiting")
	limit := fs.Duration("for", time.Minute, "most time to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}
	if *redisAddr == "" || *url == "" || *n < 1 {
		return errors.New("-redis, -url and -n are required")
	}
	urls := strings.Split(*url, ",")
	tr := &http.Transport{MaxIdleConnsPerHost: floorConcurrency, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var done, next atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: *redisAddr}, asynq.Config{
		Concurrency: floorConcurrency, Queues: map[string]int{floorQueue: 1}, TaskCheckInterval: floorPoll, LogLevel: asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(floorTaskType, func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		code, err := signedPost(ctx, hc, urls[int(next.Add(1))%len(urls)], body, id, true)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("receiver answered %d", code)
		}
		if done.Add(1) == int64(*n) {
			close(finished)
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	select {
	case <-finished:
	case <-ctx.Done():
	case <-time.After(*limit):
	}
	srv.Shutdown()
	return nil
}

// signedPost signs body as a delivery is signed (X-Service-Signature over the
// body; the Standard Webhooks signature over id.timestamp.body) and POSTs it.
func signedPost(ctx context.Context, hc *http.Client, url string, body []byte, id string, floor bool) (int, error) {
	key, _ := base64.StdEncoding.DecodeString(floorSecret[len("whsec_"):])
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(floorSecret))
	m.Write(body)
	svc := "sha256=" + hex.EncodeToString(m.Sum(nil))
	m = hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	std := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Service-Signature", svc)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", std)
	if floor {
		req.Header.Set(floorHeader, "1")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
