// Command natsd runs a standalone NATS server with JetStream on disk, for the
// chaos harness: it is its own process so the harness can kill -9 and restart
// it. It serves until SIGTERM or SIGINT.
//
//	natsd -listen 127.0.0.1:4222 -dir /tmp/nats
//
// With -cluster it is one node of a NATS cluster:
//
//	natsd -name n1 -listen 127.0.0.1:4222 -dir /tmp/n1 -cluster 127.0.0.1:6222 \
//	    -routes nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223,nats-route://127.0.0.1:6224
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/pkg/bus"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4222", "host:port for client connections")
	dir := flag.String("dir", "", "directory for JetStream files (required)")
	name := flag.String("name", "sluice-chaos-natsd", "server name (unique in a cluster)")
	cluster := flag.String("cluster", "", "host:port for cluster routes (empty: no cluster)")
	routes := flag.String("routes", "", "comma-separated route URLs of the cluster's nodes")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "natsd: -dir is required")
		os.Exit(2)
	}
	o := bus.EmbeddedOptions{Dir: *dir, Listen: *listen, ServerName: *name}
	if *cluster != "" {
		o.Cluster = &bus.ClusterOptions{Name: "sluice-chaos", Listen: *cluster, Routes: strings.Split(*routes, ",")}
	}
	ns, err := bus.StartEmbedded(o)
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
