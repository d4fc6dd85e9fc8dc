// Package health runs the readiness checks behind /readyz, for the api and
// the worker alike.
package health

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Checks are named readiness checks; each returns nil while its dependency
// answers.
type Checks map[string]func(context.Context) error

// Names are the checks' names, sorted.
func (c Checks) Names() []string { return slices.Sorted(maps.Keys(c)) }

// Exclude reads the values of ?exclude= (the kube-apiserver's convention):
// each one a check's name or a comma-separated list of them. An unknown name
// is an error that lists the known ones.
func (c Checks) Exclude(values []string) (map[string]bool, error) {
	excluded := map[string]bool{}
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if _, ok := c[name]; !ok {
				//lint:ignore ST1005 the text is the API's message for ?exclude= (api/openapi.yaml), a sentence
				return nil, fmt.Errorf("exclude must name readiness checks (%s).", strings.Join(c.Names(), ", "))
			}
			excluded[name] = true
		}
	}
	return excluded, nil
}

// Run runs every check at once, for at most a second between them, so the
// answer takes the slowest one's time, not their sum. It returns each
// check's state ("ok" or "unavailable") and the failed checks that are not
// excluded: the ones that make the answer 503.
func (c Checks) Run(ctx context.Context, excluded map[string]bool) (states map[string]string, failed []string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	names := c.Names()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		check := c[name]
		wg.Go(func() { errs[i] = check(ctx) })
	}
	wg.Wait()
	states = make(map[string]string, len(names))
	for i, name := range names {
		states[name] = "ok"
		if errs[i] != nil {
			states[name] = "unavailable"
			if !excluded[name] {
				failed = append(failed, name)
			}
		}
	}
	return states, failed
}
