package health

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestExclude(t *testing.T) {
	c := Checks{"postgres": nil, "redis": nil}
	got, err := c.Exclude([]string{"redis", " postgres ,redis"})
	if err != nil || !got["redis"] || !got["postgres"] || len(got) != 2 {
		t.Fatalf("Exclude: %v %v", got, err)
	}
	for _, bad := range [][]string{{"nope"}, {"redis,"}, {"Redis"}, {""}} {
		if _, err := c.Exclude(bad); err == nil || err.Error() != "exclude must name readiness checks (postgres, redis)." {
			t.Errorf("Exclude(%q): %v, want the error naming the checks", bad, err)
		}
	}
}

func TestRun(t *testing.T) {
	down := errors.New("down")
	// A check that does not answer is cut at a second: it is given a
	// context with a deadline at most a second away, and its answer is
	// the context's. How soon Run returns is the machine's.
	var deadline time.Duration
	var hasDeadline bool
	var cause error
	slow := func(ctx context.Context) error {
		var at time.Time
		if at, hasDeadline = ctx.Deadline(); hasDeadline {
			deadline = time.Until(at) // less, or past, when the machine is slow to call it
		}
		<-ctx.Done()
		cause = ctx.Err()
		return cause
	}
	c := Checks{
		"postgres": func(context.Context) error { return nil },
		"redis":    func(context.Context) error { return down },
		"slow":     slow,
	}
	states, failed := c.Run(context.Background(), map[string]bool{"redis": true})
	if !hasDeadline || deadline > time.Second || !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("the check that does not answer got a deadline %s away and ended with %v; want at most a second, and DeadlineExceeded", deadline, cause)
	}
	if states["postgres"] != "ok" || states["redis"] != "unavailable" || states["slow"] != "unavailable" {
		t.Errorf("states %v", states)
	}
	if !slices.Equal(failed, []string{"slow"}) {
		t.Errorf("failed %v, want [slow]: redis is excluded", failed)
	}
}
