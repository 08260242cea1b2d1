// Command natsd runs a standalone NATS server with JetStream on disk, for the
// chaos harness: it is its own process so the harness can kill -9 and restart
// it. It serves until SIGTERM or SIGINT.
//
//	natsd -listen 127.0.0.1:4222 -dir /tmp/nats
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/pkg/bus"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4222", "host:port for client connections")
	dir := flag.String("dir", "", "directory for JetStream files (required)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "natsd: -dir is required")
		os.Exit(2)
	}
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{Dir: *dir, Listen: *listen, ServerName: "sluice-chaos-natsd"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	ns.Shutdown()
	ns.WaitForShutdown()
}
