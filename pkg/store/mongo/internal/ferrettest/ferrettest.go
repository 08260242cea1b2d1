// Package ferrettest runs an embedded FerretDB (SQLite handler) on loopback
// for the MongoDB driver's tests. It is test-only code: nothing outside
// _test.go files may import it, except the ferretd command beside it,
// which runs the same server as a process of its own (see Serve) for the
// chaos harness.
//
// FerretDB v1 is not atomic under concurrent commands: two findAndModify
// commands on the same document can both match it, and two conditional
// $inc updates can both pass their condition (without the gate below the
// conformance suite sees one job claimed by two workers and admission caps
// overshot). Real MongoDB makes every single-document write atomic, and
// the driver relies on that. So the server sits behind a small proxy (see
// proxy.go) that lets one command through at a time, which makes each
// command atomic again without hiding anything else: the driver still sees
// real wire messages, real errors and many concurrent connections.
//
// Each Start is a FerretDB and a proxy of its own. One command at a time
// means one server keeps one core busy at most, so tests that can run in
// parallel are faster with a server each.
package ferrettest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// newMu serializes ferretdb.New, which sets a variable of FerretDB's own
// (version.Get().Package) without a lock.
var newMu sync.Mutex

// Server is an embedded FerretDB behind the one-command-at-a-time proxy.
type Server struct {
	uri   string
	stop  func()
	proxy *proxy
}

// Start starts FerretDB with its SQLite files under dir and a proxy in
// front of it, both on 127.0.0.1, and stops them when tb ends. It fails tb
// when either cannot start.
func Start(tb testing.TB, dir string) *Server {
	tb.Helper()
	if testing.Short() {
		tb.Skip("FerretDB: not run with -short (make test runs it)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	// ferretdb.New writes a package variable of FerretDB's: one at a time.
	newMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:   slog.New(slog.DiscardHandler),
		Handler:  "sqlite",
		// Test data is thrown away: no fsync per commit.
		SQLiteURL: "file:" + dir + "/?_pragma=synchronous(OFF)",
	})
	newMu.Unlock()
	if err != nil {
		cancel()
		tb.Fatalf("ferrettest: new FerretDB: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	// MongoDBURI waits for the listener; it is up once it answers.
	upstream, err := hostOf(f.MongoDBURI())
	if err != nil {
		cancel()
		tb.Fatalf("ferrettest: %v", err)
	}
	if err := waitListening(upstream, 10*time.Second); err != nil {
		cancel()
		tb.Fatalf("ferrettest: FerretDB does not listen: %v", err)
	}

	p, err := startProxy(upstream)
	if err != nil {
		cancel()
		tb.Fatalf("ferrettest: start proxy: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			p.close()
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				tb.Errorf("ferrettest: FerretDB did not stop within 10s")
			}
		})
	}
	tb.Cleanup(stop)
	return &Server{uri: "mongodb://" + p.addr(), stop: stop, proxy: p}
}

// Stop stops the proxy and FerretDB before the test ends, as a server
// that goes down would: open connections are cut and new ones refused.
func (s *Server) Stop() { s.stop() }

// URI is the mongodb:// URL of the proxy, without a database name.
func (s *Server) URI() string { return s.uri }

// DatabaseURI is the mongodb:// URL of the proxy with db as its database
// (none when db is empty).
func (s *Server) DatabaseURI(db string) string { return s.uri + "/" + db }

// hostOf extracts host:port from the mongodb:// URI FerretDB reports.
func hostOf(uri string) (string, error) {
	const scheme = "mongodb://"
	if len(uri) <= len(scheme) || uri[:len(scheme)] != scheme {
		return "", fmt.Errorf("unexpected FerretDB URI %q", uri)
	}
	host := uri[len(scheme):]
	for i, c := range host {
		if c == '/' || c == '?' {
			host = host[:i]
			break
		}
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		return "", fmt.Errorf("FerretDB URI %q: %w", uri, err)
	}
	return host, nil
}

// waitListening dials addr until it accepts a connection or d passes.
func waitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("dial %s", addr), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
