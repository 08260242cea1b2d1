// Package dial opens the store a service is configured for: MongoDB when
// SLUICE_STORE is a mongodb:// URL, otherwise the embedded SQLite store
// under SLUICE_DATA_DIR.
package dial

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/mongo"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
)

// Env is the store part of every service's configuration.
type Env struct {
	// Store is a mongodb:// URL, or empty for the embedded store.
	Store string `env:"SLUICE_STORE" doc:"The job store: a mongodb:// (or mongodb+srv://) URL; empty (or sqlite://path) for the embedded SQLite store, in SLUICE_DATA_DIR by default."`
	// DataDir holds the embedded store and the embedded NATS files.
	DataDir string `env:"SLUICE_DATA_DIR" envDefault:"./.sluice" doc:"The directory of the embedded store (sluice.db), the embedded NATS server's files, and a worker's scratch and cache folders."`
}

// Validate checks the store settings.
func (e Env) Validate() error {
	switch {
	case e.Store == "":
		if e.DataDir == "" {
			return fmt.Errorf("SLUICE_DATA_DIR: must not be empty when SLUICE_STORE is empty")
		}
	case strings.HasPrefix(e.Store, "mongodb://"), strings.HasPrefix(e.Store, "mongodb+srv://"):
	case strings.HasPrefix(e.Store, "sqlite://"):
	default:
		return fmt.Errorf("SLUICE_STORE: %q is neither a mongodb:// URL nor empty", redact(e.Store))
	}
	return nil
}

// Path is the embedded database file for this configuration.
func (e Env) Path() string {
	if p, ok := strings.CutPrefix(e.Store, "sqlite://"); ok {
		return p
	}
	return filepath.Join(e.DataDir, "sluice.db")
}

// Open opens the configured store.
func Open(ctx context.Context, e Env) (store.Store, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if strings.HasPrefix(e.Store, "mongodb") {
		s, err := mongo.Open(ctx, e.Store)
		if err != nil {
			// Never the raw URL here: it may hold a password.
			return nil, fmt.Errorf("open MongoDB store %s: %w", redact(e.Store), err)
		}
		return s, nil
	}
	s, err := sqlite.Open(ctx, e.Path())
	if err != nil {
		return nil, fmt.Errorf("open embedded store %s: %w", e.Path(), err)
	}
	if e.Store == "" {
		unlist(e.DataDir)
	}
	return s, nil
}

// unlist makes the data directory unlistable and unwritable by anyone but
// its owner, keeping whether they may pass through it (a worker's runs
// with a uid of their own reach their scratch directories below it by
// path): what is in it is the store's, the embedded NATS server's and the
// workers', never a run's to see. Best effort: a directory the process
// does not own keeps its mode.
func unlist(dir string) {
	info, err := os.Stat(dir)
	if err != nil {
		return
	}
	if mode := info.Mode().Perm(); mode&0o066 != 0 {
		_ = os.Chmod(dir, mode&^0o066)
	}
}

// redact hides credentials in a URL for error messages.
func redact(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if i := strings.Index(u, "://"); i >= 0 && i < at {
			return u[:i+3] + "***" + u[at:]
		}
	}
	return u
}

// OpenRetry is Open retried with exponential backoff (up to 10 s apart)
// until it succeeds or ctx ends, so a service started before its database
// waits for it instead of exiting. A configuration error is returned at
// once. notify, when set, hears every failed try and the wait before the
// next one.
func OpenRetry(ctx context.Context, e Env, notify func(err error, next time.Duration)) (store.Store, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	var s store.Store
	err := backoff.RetryNotify(func() error {
		var err error
		s, err = Open(ctx, e)
		return err
	}, b, notify)
	if err != nil {
		return nil, err
	}
	return s, nil
}
