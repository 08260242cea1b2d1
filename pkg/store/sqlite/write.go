package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Group commit. Every write goes through one goroutine that owns the write
// connection. It takes whatever requests are waiting (up to maxBatch), runs
// each inside its own SAVEPOINT of one BEGIN IMMEDIATE transaction, and
// commits once. A request that fails is rolled back to its savepoint alone;
// the others commit. Under load this turns hundreds of small transactions
// (each paying for a WAL append and lock round trip) into a few, without
// changing what any single request sees: requests still run one after the
// other, each reading everything committed or written before it.

// maxBatch bounds the requests one transaction carries.
const maxBatch = 256

// errClosed is returned for writes after Close.
var errClosed = errors.New("store closed")

type writeReq struct {
	ctx  context.Context
	op   string
	fn   func(tx *sql.Tx) error
	err  error
	done chan struct{}
}

type writer struct {
	reqs     chan *writeReq
	quit     chan struct{}
	finished chan struct{}
	once     sync.Once
}

func newWriter() *writer {
	return &writer{reqs: make(chan *writeReq, maxBatch), quit: make(chan struct{}), finished: make(chan struct{})}
}

// stop ends the write loop after the requests already queued, and waits.
func (w *writer) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.finished
}

// write runs fn in the write transaction and returns its error (or the
// commit's). Errors get the "sqlite: op: " prefix.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	req := &writeReq{ctx: ctx, op: op, fn: fn, done: make(chan struct{})}
	select {
	case s.writes.reqs <- req:
	case <-s.writes.quit:
		return fmt.Errorf("sqlite: %s: %w", op, errClosed)
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: %w", op, ctx.Err())
	}
	<-req.done // once queued, it runs (or is skipped as cancelled) promptly
	if req.err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, req.err)
	}
	return nil
}

// writeLoop owns the write connection until stop.
func (s *Store) writeLoop() {
	defer close(s.writes.finished)
	batch := make([]*writeReq, 0, maxBatch)
	for {
		var first *writeReq
		select {
		case first = <-s.writes.reqs:
		case <-s.writes.quit:
			// Run what is still queued, then leave.
			for {
				select {
				case r := <-s.writes.reqs:
					s.commit(append(batch[:0], r))
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-s.writes.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		s.commit(batch)
	}
}

// commit runs one batch in one transaction and reports to every request.
func (s *Store) commit(batch []*writeReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	fail := func(err error) {
		for _, r := range batch {
			if r.err == nil {
				r.err = err
			}
		}
	}
	tx, err := s.w.BeginTx(context.Background(), nil)
	if err != nil {
		fail(fmt.Errorf("begin: %w", err))
		return
	}
	single := len(batch) == 1
	ok := 0
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if single {
			r.err = r.fn(tx)
		} else {
			r.err = s.inSavepoint(tx, r)
		}
		if r.err == nil {
			ok++
			continue
		}
		if errors.Is(r.err, errTxBroken) {
			// The transaction is unusable: the requests after this one never ran.
			for _, later := range batch[i+1:] {
				later.err = errTxBroken
			}
			break
		}
	}
	if ok == 0 {
		_ = tx.Rollback()
		return
	}
	if err := tx.Commit(); err != nil {
		for _, r := range batch {
			if r.err == nil {
				r.err = fmt.Errorf("commit: %w", err)
			}
		}
	}
}

// errTxBroken means a failure left the transaction unusable.
var errTxBroken = errors.New("write transaction aborted; try again")

// inSavepoint runs one request inside a savepoint, undoing its writes alone
// when it fails.
func (s *Store) inSavepoint(tx *sql.Tx, r *writeReq) error {
	if _, err := tx.ExecContext(r.ctx, "SAVEPOINT req"); err != nil {
		return fmt.Errorf("%w: savepoint: %v", errTxBroken, err)
	}
	if err := r.fn(tx); err != nil {
		if _, rerr := tx.ExecContext(context.Background(), "ROLLBACK TO req"); rerr != nil {
			return fmt.Errorf("%w: %v (rollback: %v)", errTxBroken, err, rerr)
		}
		if _, rerr := tx.ExecContext(context.Background(), "RELEASE req"); rerr != nil {
			return fmt.Errorf("%w: %v (release: %v)", errTxBroken, err, rerr)
		}
		return err
	}
	if _, err := tx.ExecContext(r.ctx, "RELEASE req"); err != nil {
		return fmt.Errorf("%w: release: %v", errTxBroken, err)
	}
	return nil
}
