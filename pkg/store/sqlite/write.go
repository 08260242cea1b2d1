package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/store"
)

// Group commit. Every write goes through one goroutine that owns the write
// connection. It takes whatever requests are waiting (up to maxBatch), runs
// them one after the other in one BEGIN IMMEDIATE transaction, and commits
// once. Under load this turns hundreds of small transactions
// (each paying for a WAL append and lock round trip) into a few, without
// changing what any single request sees: requests still run one after the
// other, each reading everything committed or written before it.

// maxBatch bounds the requests one transaction carries.
const maxBatch = 256

// busyGap is the longest pause between the end of one commit and the next
// request for which the writer counts as busy (see writeLoop).
const busyGap = 200 * time.Microsecond

// errClosed is returned for writes after Close.
var errClosed = errors.New("store closed")

type writeReq struct {
	ctx  context.Context
	op   string
	wop  store.WriteOp // what the write counts as
	fn   func(tx *sql.Tx) error
	read bool // writes nothing: no savepoint needed
	bulk bool // came in the bulk lane: runs alone
	// unacked: acknowledged to no one, committed without its fsync (see
	// writeUnacked).
	unacked bool
	// took is how long a bulk request's transaction held the writer.
	took time.Duration
	err  error
	done chan struct{}
}

type writer struct {
	// urgent is the lane of the writes that keep running work alive and
	// finish it (heartbeats, start acknowledgements, results): the loop
	// takes them before anything waiting in reqs, so that they never
	// queue behind admissions, claims or sweeps.
	urgent chan *writeReq
	reqs   chan *writeReq
	// bulk is the lane of the chunks of a large admission (see stage.go):
	// each runs alone in its own transaction, and the loop takes one only
	// when no other write waits or right after a transaction of other
	// writes, so that a write queued behind a chunk waits for that chunk
	// alone, and a stream of small writes never stalls an admission.
	bulk     chan *writeReq
	quit     chan struct{}
	finished chan struct{}
	once     sync.Once

	// The writer's clock (WriterTimes): wall time on transactions, in
	// their commits and yielded before them, in nanoseconds, the
	// transactions begun and the requests they carried. Only the write
	// loop adds to them.
	busy, inCommit, yielded atomic.Int64
	txs, requests           atomic.Uint64
}

// WriterTimes says how the writer spent its wall time since the store was
// opened: busy on transactions (of which committing: the log's writes and
// fsync), the rest waiting for a request; and the transactions it ran
// with the requests they carried.
func (s *Store) WriterTimes() store.WriterTimes {
	return store.WriterTimes{
		Busy:         time.Duration(s.writes.busy.Load()),
		Commit:       time.Duration(s.writes.inCommit.Load()),
		Yield:        time.Duration(s.writes.yielded.Load()),
		Transactions: s.writes.txs.Load(),
		Requests:     s.writes.requests.Load(),
	}
}

var _ store.WriterTimer = (*Store)(nil)

// timedCommit commits tx, counting the time in the writer's clock.
func (s *Store) timedCommit(tx *sql.Tx) error {
	start := time.Now()
	err := tx.Commit()
	s.writes.inCommit.Add(int64(time.Since(start)))
	return err
}

// begin begins a write transaction, counting it.
func (s *Store) begin() (*sql.Tx, error) {
	s.writes.txs.Add(1)
	return s.w.BeginTx(context.Background(), nil)
}

func newWriter() *writer {
	return &writer{urgent: make(chan *writeReq, maxBatch), reqs: make(chan *writeReq, maxBatch),
		bulk: make(chan *writeReq, maxBatch), quit: make(chan struct{}), finished: make(chan struct{})}
}

// stop ends the write loop after the requests already queued, and waits.
func (w *writer) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.finished
}

// write runs fn in the write transaction and returns its error (or the
// commit's). Errors get the "sqlite: op: " prefix.
// It counts as wop in WriteCounts once committed.
func (s *Store) write(ctx context.Context, wop store.WriteOp, op string, fn func(tx *sql.Tx) error) error {
	return s.onWriter(ctx, wop, op, s.writes.reqs, false, fn)
}

// writeBulk is write in the bulk lane (see writer.bulk): fn runs alone in
// its own transaction, and writeBulk returns how long that transaction
// held the writer, its commit included.
func (s *Store) writeBulk(ctx context.Context, wop store.WriteOp, op string, fn func(tx *sql.Tx) error) (time.Duration, error) {
	req, err := s.onWriterReq(ctx, wop, op, s.writes.bulk, false, fn)
	if err != nil {
		return 0, err
	}
	return req.took, nil
}

// writeUnacked is writeBulk for a write acknowledged to no one: its
// transaction commits without waiting for its fsync
// (synchronous=NORMAL). The next write that is acknowledged (every other
// write commits with synchronous=FULL) makes it durable with itself, the
// log being synced in order; a crash before that may lose it, with every
// write after it, never part of it. The staged children of a fan-out
// are written so (see stage.go): only the admission that follows them is
// acknowledged, and a lost chunk takes its staged row's count back with
// it. Their fsyncs were most of a small chunk's time: the 400k-child
// admission of BenchmarkNoisyFanout took up to twice as long with them.
func (s *Store) writeUnacked(ctx context.Context, wop store.WriteOp, op string, fn func(tx *sql.Tx) error) (time.Duration, error) {
	req := &writeReq{ctx: ctx, op: op, wop: wop, fn: fn, bulk: true, unacked: true, done: make(chan struct{})}
	if err := s.send(ctx, op, s.writes.bulk, req); err != nil {
		return 0, err
	}
	return req.took, nil
}

// writeUrgent is write in the urgent lane (see writer.urgent).
func (s *Store) writeUrgent(ctx context.Context, wop store.WriteOp, op string, fn func(tx *sql.Tx) error) error {
	return s.onWriter(ctx, wop, op, s.writes.urgent, false, fn)
}

func (s *Store) onWriter(ctx context.Context, wop store.WriteOp, op string, lane chan<- *writeReq, read bool, fn func(tx *sql.Tx) error) error {
	_, err := s.onWriterReq(ctx, wop, op, lane, read, fn)
	return err
}

// onWriterReq is onWriter, returning the request run.
func (s *Store) onWriterReq(ctx context.Context, wop store.WriteOp, op string, lane chan<- *writeReq, read bool, fn func(tx *sql.Tx) error) (*writeReq, error) {
	req := &writeReq{ctx: ctx, op: op, wop: wop, fn: fn, read: read, bulk: lane == s.writes.bulk, done: make(chan struct{})}
	if err := s.send(ctx, op, lane, req); err != nil {
		return nil, err
	}
	return req, nil
}

// send queues req in lane and waits for it to run.
func (s *Store) send(ctx context.Context, op string, lane chan<- *writeReq, req *writeReq) error {
	select {
	case lane <- req:
	case <-s.writes.quit:
		return fmt.Errorf("sqlite: %s: %w", op, errClosed)
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: %w", op, ctx.Err())
	}
	select {
	case <-req.done:
	case <-s.writes.finished:
		// The loop ended; it may still have run this request just before.
		select {
		case <-req.done:
		default:
			return fmt.Errorf("sqlite: %s: %w", op, errClosed)
		}
	}
	if req.err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, req.err)
	}
	return nil
}

// writeLoop owns the write connection until stop.
func (s *Store) writeLoop() {
	defer close(s.writes.finished)
	batch := make([]*writeReq, 0, maxBatch)
	var (
		lastCommit time.Time
		lastBulk   bool // the last transaction was a bulk request's
	)
	for {
		var first *writeReq
		if !lastBulk {
			// Right after a transaction of other writes, a waiting bulk
			// request goes first: it is never starved.
			select {
			case first = <-s.writes.bulk:
			default:
			}
		}
		if first == nil {
			select {
			case first = <-s.writes.urgent:
			default:
				select {
				case first = <-s.writes.urgent:
				case first = <-s.writes.reqs:
				default:
					select {
					case first = <-s.writes.urgent:
					case first = <-s.writes.reqs:
					case first = <-s.writes.bulk:
					case <-s.writes.quit:
						// Run what is still queued, each alone, then leave.
						for queued := s.gather(nil, true); len(queued) > 0; queued = s.gather(queued[:0], true) {
							for _, r := range queued {
								start := time.Now()
								s.commit(append(batch[:0], r))
								s.busyFor(start, 1)
							}
						}
						return
					}
				}
			}
		}
		start := time.Now() // busy from here to the end of its commit
		if first.bulk {
			s.commit(append(batch[:0], first))
			lastCommit, lastBulk = time.Now(), true
			s.busyFor(start, 1)
			continue
		}
		batch = s.gather(append(batch[:0], first), false)
		if len(batch) == 1 && time.Since(lastCommit) < busyGap {
			// Writes come back to back: let the goroutines about to write
			// queue up first. A lone request here then usually means
			// others are a few microseconds away, and a commit for each
			// costs far more (its pages written to the log, its fsync)
			// than the yield. A write after a quiet spell goes at once:
			// behind a busy run queue the yield would cost it more than
			// it saves.
			y := time.Now()
			runtime.Gosched()
			s.writes.yielded.Add(int64(time.Since(y)))
			batch = s.gather(batch, false)
		}
		s.commit(batch)
		lastCommit, lastBulk = time.Now(), false
		s.busyFor(start, len(batch))
	}
}

// busyFor counts the writer busy from start to now on n requests.
func (s *Store) busyFor(start time.Time, n int) {
	s.writes.busy.Add(int64(time.Since(start)))
	s.writes.requests.Add(uint64(n))
}

// gather appends the requests already queued to batch, up to maxBatch:
// the urgent lane's first, then the others, then (withBulk) the bulk
// lane's.
func (s *Store) gather(batch []*writeReq, withBulk bool) []*writeReq {
	lanes := []chan *writeReq{s.writes.urgent, s.writes.reqs}
	if withBulk {
		lanes = append(lanes, s.writes.bulk)
	}
	for _, lane := range lanes {
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-lane:
				batch = append(batch, r)
			default:
				break more
			}
		}
	}
	return batch
}

// commit runs one batch in one transaction and reports to every request.
//
// Requests run back to back with no savepoints: a request that fails with
// one of the store's sentinel errors (a missed compare-and-set, a missing
// job, a forbidden transition) has written nothing, so the others commit.
// Any other failure may have left a partial write behind: the whole
// transaction is rolled back and every other request runs again alone.
func (s *Store) commit(batch []*writeReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) == 1 {
		start := time.Now()
		batch[0].err = s.runAlone(batch[0])
		batch[0].took = time.Since(start)
		return
	}
	if err := s.syncFor(false); err != nil {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	tx, err := s.begin()
	if err != nil {
		for _, r := range batch {
			r.err = fmt.Errorf("begin: %w", err)
		}
		return
	}
	s.resetCounters()
	s.rows.reset()
	for _, r := range batch {
		if r.err = r.ctx.Err(); r.err != nil {
			continue
		}
		s.rows.op = r.wop
		if r.read {
			// A read sees what the requests before it wrote, parents'
			// counts included (they are written at the commit).
			if err := s.flushParents(context.Background(), tx); err != nil {
				s.rerunAlone(tx, batch, nil)
				return
			}
		}
		r.err = r.fn(tx)
		if r.err == nil || r.read || wroteNothing(r.err) {
			continue
		}
		s.rerunAlone(tx, batch, r)
		return
	}
	if err := s.flushCounters(context.Background(), tx); err != nil {
		s.rerunAlone(tx, batch, nil)
		return
	}
	if err := s.timedCommit(tx); err != nil {
		for _, r := range batch {
			if r.err == nil && !r.read {
				r.err = fmt.Errorf("commit: %w", err)
			}
		}
		return
	}
	n := &s.rows.n
	for _, r := range batch {
		if r.err == nil && !r.read {
			n.Writes[r.wop]++
			n.Commits = 1
		}
	}
	s.tally.Add(*n)
}

// rerunAlone rolls tx back after failed (nil: the commit's own step
// failed) left it with a partial write, and runs every other request of
// the batch again in a transaction of its own.
func (s *Store) rerunAlone(tx *sql.Tx, batch []*writeReq, failed *writeReq) {
	_ = tx.Rollback()
	for _, o := range batch {
		if o != failed && o.ctx.Err() == nil {
			o.err = s.runAlone(o)
		}
	}
}

// runAlone runs one request in its own transaction.
func (s *Store) runAlone(r *writeReq) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if err := s.syncFor(r.unacked); err != nil {
		return err
	}
	tx, err := s.begin()
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	s.resetCounters()
	s.rows.reset()
	s.rows.op = r.wop
	if err := r.fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if r.read {
		_ = tx.Rollback()
		return nil
	}
	if err := s.flushCounters(context.Background(), tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := s.timedCommit(tx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.rows.n.Writes[r.wop]++
	s.rows.n.Commits++
	s.tally.Add(s.rows.n)
	return nil
}

// wroteNothing reports whether a request's error is one a driver function
// returns before it writes anything.
func wroteNothing(err error) bool {
	return errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrBadTransition) || errors.Is(err, sql.ErrNoRows) || errors.As(err, new(errDecided))
}

// syncFor sets the write connection's synchronous mode for the next
// transaction: NORMAL for an unacknowledged one (see writeUnacked), FULL
// for any other. Until FULL is back no other write runs.
func (s *Store) syncFor(unacked bool) error {
	if unacked == s.relaxed {
		return nil
	}
	mode := "FULL"
	if unacked {
		mode = "NORMAL"
	}
	if _, err := s.w.ExecContext(context.Background(), "PRAGMA synchronous = "+mode); err != nil {
		return fmt.Errorf("set synchronous %s: %w", mode, err)
	}
	s.relaxed = unacked
	return nil
}
