// Command ferretd runs FerretDB (SQLite handler) behind the one-command-at-
// a-time proxy of package ferrettest as a process of its own, so that the
// chaos harness can kill -9 and restart the store like any other service.
// The data stays under -dir across restarts. It prints
// "ferretd: listening on mongodb://<addr>" once clients can connect and
// stops cleanly on SIGTERM or SIGINT.
//
//	ferretd -listen 127.0.0.1:27017 -dir /tmp/ferret
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/pkg/store/mongo/internal/ferrettest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "host:port clients connect to")
	dir := flag.String("dir", "", "directory for the SQLite files (required)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "ferretd: -dir is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "ferretd:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := ferrettest.Serve(ctx, ferrettest.ServeOptions{
		Dir:    *dir,
		Listen: *listen,
		Ready:  func(addr string) { fmt.Printf("ferretd: listening on mongodb://%s\n", addr) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferretd:", err)
		os.Exit(1)
	}
}
