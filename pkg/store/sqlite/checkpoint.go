package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// Checkpoints. In WAL mode every commit appends to the write-ahead log, and
// a checkpoint copies the log back into the database file (and, with
// synchronous=FULL, fsyncs it). SQLite runs one automatically on the
// commit that crosses 1,000 log pages, so that commit, and every write
// queued behind it, waits for the copy: tens of milliseconds on a busy
// store. The writer here turns that off, and a background loop on its own
// connection runs passive checkpoints instead, which never block writers.

// checkpointEvery is how often the background checkpoint runs.
const checkpointEvery = 250 * time.Millisecond

// checkpointer runs passive checkpoints on its own connection until stop.
type checkpointer struct {
	db   *sql.DB
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// startCheckpointer opens a connection to path and checkpoints every
// checkpointEvery.
func startCheckpointer(path string, cfg config) (*checkpointer, error) {
	db, err := sql.Open("sqlite", dsn(path, cfg, roleCheckpointer))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, quit: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// A busy or locked database is fine: the next tick tries again.
		_, _ = c.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
		cancel()
	}
}

// stop ends the loop and closes the connection.
func (c *checkpointer) stop() error {
	c.once.Do(func() { close(c.quit) })
	<-c.done
	return c.db.Close()
}
