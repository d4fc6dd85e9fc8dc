// Command gatehouse is the command line of Gatehouse for merchants'
// developers (docs/webhooks.md and api/openapi.yaml): listen forwards the account's
// events to a local URL signed exactly as a webhook delivery, trigger
// creates sandbox objects that fire an event, and charges, refunds and
// events list and get objects. It talks to the API at GATEHOUSE_API with the
// secret key GATEHOUSE_SECRET_KEY. doctor needs neither: it plays the
// gateway against a webhook receiver and prints a report card of its checks
// (signatures, timestamps, redeliveries, redirects, TLS).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// defaultAPI is where the API listens when GATEHOUSE_API is not set (make run).
const defaultAPI = "http://127.0.0.1:8080"

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ error }

// run executes the command line and returns the exit status: 0, 1 for a
// failure (an API error, an unreachable API), 2 for a usage mistake.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	root := newRoot(getenv, stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return 0 // Ctrl-C ends listen
	}
	fmt.Fprintln(stderr, "gatehouse:", err)
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// cli is the state every command shares.
type cli struct {
	getenv func(string) string
	out    io.Writer
	errOut io.Writer
	api    string
	json   bool
}

// client returns the API client, or a usage error without a key.
func (c *cli) client() (*client, error) {
	key := c.getenv("GATEHOUSE_SECRET_KEY")
	if key == "" {
		return nil, usageError{errors.New("GATEHOUSE_SECRET_KEY is not set: export your secret key (sk_test_...), from the dashboard's API keys page or POST /v1/me/api_keys")}
	}
	return newClient(c.api, key), nil
}

func newRoot(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	c := &cli{getenv: getenv, out: stdout, errOut: stderr}
	api := getenv("GATEHOUSE_API")
	if api == "" {
		api = defaultAPI
	}
	root := &cobra.Command{
		Use:   "gatehouse",
		Short: "Gatehouse from the command line: receive webhooks locally, trigger events, read objects, check a receiver",
		Long: `gatehouse talks to the Gatehouse API at GATEHOUSE_API (default ` + defaultAPI + `)
with the secret key in GATEHOUSE_SECRET_KEY.

  gatehouse listen --forward-to http://localhost:3000/webhooks
  gatehouse trigger charge.captured
  gatehouse charges list
  gatehouse doctor http://localhost:3000/webhooks --secret whsec_...`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&c.api, "api", api, "the API's base URL (GATEHOUSE_API)")
	root.PersistentFlags().BoolVar(&c.json, "json", false, "print JSON instead of text")
	root.AddCommand(c.listenCommand(), c.triggerCommand(), c.doctorCommand())
	for _, o := range objectKinds {
		root.AddCommand(c.objectCommand(o))
	}
	return root
}

// positional wraps cobra's argument checks as usage errors.
func positional(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
