// Package bustest starts a real embedded NATS server with JetStream for one
// test: its files under the test's temporary directory, its connections
// and the server itself stopped when the test ends. It replaces the setup
// every package used to copy.
//
//	srv := bustest.Start(t)
//	nc, js := srv.Connect("scheduler")
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/bus"
)

// Server is an embedded NATS server owned by one test.
type Server struct {
	// NS is the server, for tests that restart or inspect it.
	NS *server.Server
	tb testing.TB
}

// Start runs a server that accepts in-process connections only.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, bus.EmbeddedOptions{NoListen: true})
}

// startTimeout bounds a test server's start. The tests of every package
// run at once under the race detector on two cores, where a server (a
// clustered one especially) has taken over the default 10 s to accept
// clients.
const startTimeout = time.Minute

// StartWith runs a server with o; an empty o.Dir is a directory of the
// test's own. Set o.Listen (e.g. "127.0.0.1:0") for a server that outside
// clients reach at URL.
func StartWith(tb testing.TB, o bus.EmbeddedOptions) *Server {
	tb.Helper()
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = startTimeout
	}
	ns, err := bus.StartEmbedded(o)
	if err != nil {
		tb.Fatalf("bustest: start nats: %v", err)
	}
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return &Server{NS: ns, tb: tb}
}

// URL is where outside clients reach the server (only with o.Listen).
func (s *Server) URL() string { return s.NS.ClientURL() }

// Connect opens an in-process connection named name and its JetStream
// context; both are closed when the test ends.
func (s *Server) Connect(name string) (*nats.Conn, jetstream.JetStream) {
	s.tb.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(s.NS), nats.Name(name))
	if err != nil {
		s.tb.Fatalf("bustest: connect %s: %v", name, err)
	}
	s.tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.tb.Fatalf("bustest: jetstream for %s: %v", name, err)
	}
	return nc, js
}

// JobStream connects and makes sure the job stream exists, for tests of
// the components that publish or consume jobs.
func (s *Server) JobStream(name string) (*nats.Conn, jetstream.JetStream) {
	s.tb.Helper()
	nc, js := s.Connect(name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js); err != nil {
		s.tb.Fatalf("bustest: job stream: %v", err)
	}
	return nc, js
}
