// Command listener is what the tests of package harness build: a server
// that binds ADDR (port 0 takes a free port), logs the address it got as
// Gatehouse's binaries do (a JSON line "listening" with addr), and answers
// every request with its process id until it is killed. It exits 1 when it
// cannot bind ADDR.
package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	log.Info("starting")
	ln, err := net.Listen("tcp", os.Getenv("ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listener:", err)
		os.Exit(1)
	}
	log.Info("listening", "addr", ln.Addr().String())
	pid := fmt.Sprint(os.Getpid())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, pid) }))
}
