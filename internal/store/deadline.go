package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Deadlines bounds, from the client's side, each statement at statement
// and each new connection at connect.
//
// A server-side statement_timeout alone cannot end a statement whose
// server has dropped off the network (packets vanish, no reset): nothing
// comes back to say so, and the client would wait for TCP to give up,
// minutes later. So every Exec, Query (until its rows are closed),
// SendBatch (until its results are closed), CopyFrom and Prepare runs under
// a context deadline, which makes pgx close the connection and return a
// timeout; mapErr turns it into Unavailable (503). Taking a connection from
// the pool is bounded by statement+connect: the pings of pooled connections
// that sat idle (each within statement; one that fails is dropped) and the
// opening of a new one, or a wait for a free one. The server's statement_timeout is set as well, so a
// statement slow on a healthy network is cancelled by the server and its
// connection kept.
func Deadlines(statement, connect time.Duration) OpenOption {
	return func(c *openConfig) {
		ConnectTimeout(connect)(c)
		c.PingTimeout = statement
		c.ConnConfig.RuntimeParams["statement_timeout"] = formatMillis(statement)
		d := deadlineTracer{d: statement, acquire: statement + connect}
		if c.ConnConfig.Tracer == nil {
			c.ConnConfig.Tracer = d
			return
		}
		// The deadline first, so the other tracer's spans run under it.
		c.ConnConfig.Tracer = multitracer.New(d, c.ConnConfig.Tracer)
	}
}

// ConnectTimeout bounds opening each connection of the pool, TLS and
// authentication included: for the pools that run migrations, whose
// statements take the time they need.
func ConnectTimeout(d time.Duration) OpenOption {
	return func(c *openConfig) { c.ConnConfig.ConnectTimeout = d }
}

func formatMillis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// deadlineTracer gives each traced call a context with its deadline and
// cancels it when the call ends.
type deadlineTracer struct{ d, acquire time.Duration }

type cancelKey struct{}

func (t deadlineTracer) start(ctx context.Context) context.Context { return within(ctx, t.d) }

func within(ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	return context.WithValue(ctx, cancelKey{}, cancel)
}

func (deadlineTracer) end(ctx context.Context) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

func (t deadlineTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return t.start(ctx)
}

func (deadlineTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t deadlineTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return within(ctx, t.acquire)
}

func (t deadlineTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	t.end(ctx)
}
