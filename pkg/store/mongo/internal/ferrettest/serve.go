package ferrettest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Dir holds FerretDB's SQLite files; a restart on the same Dir keeps
	// the data. Required.
	Dir string
	// Listen is the proxy's host:port, the address clients use. Keeping it
	// across restarts lets clients reconnect. Required.
	Listen string
	// Logger receives FerretDB's logs; nil discards them.
	Logger *slog.Logger
	// Ready, when set, is called with the proxy's address once the server
	// answers.
	Ready func(addr string)
}

// Serve runs FerretDB (SQLite handler, files under o.Dir) behind the
// one-command-at-a-time proxy listening on o.Listen until ctx ends, then
// closes every connection and stops FerretDB. Unlike Start it needs no
// testing.TB: it is what a standalone process runs.
//
// The SQLite files use synchronous=NORMAL in WAL mode: a killed process
// loses no committed write (only a machine crash can lose the last ones).
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Dir == "" || o.Listen == "" {
		return errors.New("ferrettest: serve: a data dir and a listen address are required")
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	newMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + o.Dir + "/?_pragma=synchronous(NORMAL)",
	})
	newMu.Unlock()
	if err != nil {
		return fmt.Errorf("ferrettest: new FerretDB: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	stopFerret := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("ferrettest: FerretDB did not stop within 10s")
		}
	}

	upstream, err := hostOf(f.MongoDBURI())
	if err == nil {
		err = waitListening(upstream, 10*time.Second)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("ferrettest: FerretDB does not listen: %w", err), stopFerret())
	}
	p, err := startProxyOn(o.Listen, upstream)
	if err != nil {
		return errors.Join(fmt.Errorf("ferrettest: start proxy on %s: %w", o.Listen, err), stopFerret())
	}
	if o.Ready != nil {
		o.Ready(p.addr())
	}
	<-ctx.Done()
	p.close()
	return stopFerret()
}
