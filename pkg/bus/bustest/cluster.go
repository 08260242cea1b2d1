package bustest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	tb.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	// A clustered JetStream node needs its routes before it starts, so the
	// route ports are chosen first (routePort); the client ports are picked
	// by each server as it binds. Both are kept, so that a node stopped
	// and started again comes back as itself.
	routes := make([]string, n)
	for i := range n {
		routes[i] = "nats-route://" + routeAddr(tb)
	}
	for i := range n {
		o := base
		o.Dir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		o.Listen = "127.0.0.1:0"
		o.ServerName = fmt.Sprintf("sluice-test-n%d", i+1)
		if o.StartTimeout <= 0 {
			o.StartTimeout = startTimeout
		}
		o.Cluster = &bus.ClusterOptions{Name: "sluice-test", Listen: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes}
		nd := &node{opts: o}
		c.nodes = append(c.nodes, nd)
		// Nodes start one after the other; each waits for clients only,
		// not for the others, so starting them in turn is fine.
		c.Start(i)
		nd.opts.Listen = nd.ns.Addr().String()
	}
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

// routeAddr is FreeAddr, or fails tb.
func routeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := FreeAddr()
	if err != nil {
		tb.Fatalf("bustest: %v", err)
	}
	return addr
}

// FreeAddr is a loopback address with a port below the kernel's ephemeral
// range and free at the moment, for a server whose port must be known
// before it starts (a cluster's routes, a process started again on the
// same port). A port from the ephemeral range (what listening on port 0
// gives) could be handed to another test's listener or outgoing
// connection before the server binds it, and the server would then never
// become ready. Below that range only callers of FreeAddr compete, each
// at random among thousands of ports.
func FreeAddr() (string, error) {
	low := ephemeralLow()
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(portFloor+rand.IntN(low-portFloor)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port between %d and %d", portFloor, low)
}

// portFloor is the lowest port FreeAddr gives.
const portFloor = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read or leaves too little room below it).
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < portFloor+1000 {
		return fallback
	}
	return low
}
