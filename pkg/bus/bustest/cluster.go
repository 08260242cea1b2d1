package bustest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluicehq/sluice/pkg/bus"
)

// Cluster is a NATS cluster of embedded servers on loopback, owned by one
// test: each node has its own JetStream directory and fixed ports, so a
// node that was stopped comes back as itself.
type Cluster struct {
	tb    testing.TB
	nodes []*node
}

// node is one server of a Cluster.
type node struct {
	opts bus.EmbeddedOptions
	ns   *server.Server // nil while stopped
}

// StartCluster runs n clustered servers with JetStream and waits until
// each accepts clients. They are stopped when the test ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, n, bus.EmbeddedOptions{})
}

// StartClusterWith is StartCluster with every node started from base
// (ConfigFile, Auth); the directories, addresses, names and routes are the
// cluster's own.
func StartClusterWith(tb testing.TB, n int, base bus.EmbeddedOptions) *Cluster {
	tb.Helper()
	dir := tb.TempDir()
	c := &Cluster{tb: tb}
	routes := make([]string, n)
	clients := make([]string, n)
	for i := range n {
		clients[i] = freeAddr(tb)
		routes[i] = freeAddr(tb)
	}
	for i := range n {
		o := base
		o.Dir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		o.Listen = clients[i]
		o.ServerName = fmt.Sprintf("sluice-test-n%d", i+1)
		if o.StartTimeout <= 0 {
			o.StartTimeout = startTimeout
		}
		o.Cluster = &bus.ClusterOptions{Name: "sluice-test", Listen: routes[i], Routes: routeURLs(routes)}
		c.nodes = append(c.nodes, &node{opts: o})
	}
	// Nodes start one after the other; each waits for clients only, not
	// for the others, so starting them in turn is fine.
	for i := range c.nodes {
		c.Start(i)
	}
	tb.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	return c
}

// URL is every node's client URL, comma-separated, as a client (and
// SLUICE_NATS_URL) takes it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = "nats://" + n.opts.Listen
	}
	return strings.Join(urls, ",")
}

// Server is node i while it runs (nil when stopped).
func (c *Cluster) Server(i int) *server.Server { return c.nodes[i].ns }

// Stop shuts node i down (a no-op when it is stopped).
func (c *Cluster) Stop(i int) {
	n := c.nodes[i]
	if n.ns == nil {
		return
	}
	n.ns.Shutdown()
	n.ns.WaitForShutdown()
	n.ns = nil
}

// Start starts node i again with its files and ports (a no-op when it
// runs).
func (c *Cluster) Start(i int) {
	c.tb.Helper()
	n := c.nodes[i]
	if n.ns != nil {
		return
	}
	ns, err := bus.StartEmbedded(n.opts)
	if err != nil {
		c.tb.Fatalf("bustest: start %s: %v", n.opts.ServerName, err)
	}
	n.ns = ns
}

// routeURLs are the nats-route URLs of the route addresses.
func routeURLs(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = "nats-route://" + a
	}
	return out
}

// freeAddr is a loopback address with a port free at the moment.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("bustest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
