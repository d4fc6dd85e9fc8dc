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
	slow := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	c := Checks{
		"postgres": func(context.Context) error { return nil },
		"redis":    func(context.Context) error { return down },
		"slow":     slow,
	}
	start := time.Now()
	states, failed := c.Run(context.Background(), map[string]bool{"redis": true})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Run took %s; a check that does not answer is cut at a second", took)
	}
	if states["postgres"] != "ok" || states["redis"] != "unavailable" || states["slow"] != "unavailable" {
		t.Errorf("states %v", states)
	}
	if !slices.Equal(failed, []string{"slow"}) {
		t.Errorf("failed %v, want [slow]: redis is excluded", failed)
	}
}
