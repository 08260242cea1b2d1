package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Staged fan-outs. The admission of a parent and its children is one
// write transaction, and the store has one writer: a fan-out of 100,000
// items held it for about a second, and every other tenant's write waited.
// The parents of a batch holding more children than one chunk are
// admitted in steps instead:
//
//  1. its children are inserted held (held = 1: out of the ready queue
//     and every sweep), chunk by chunk, each chunk its own write
//     transaction in the writer's bulk lane, so other writes go in
//     between; a row of the table staged records how far it went;
//  2. the admission's transaction checks the caps and the dedup key as
//     for any job, checks (by the staged row, which it deletes) that
//     every child is there, inserts the parent and releases its first
//     window of children: only then is the fan-out visible (its parent),
//     listed and dispatchable (its children);
//  3. a fan-out that was not admitted (rejected, joined, or an error) has
//     its children deleted again, chunk by chunk, and its staged row.
//
// Until step 2 no one knows the children's ids (the parent's id is the
// gateway's, not yet answered), no query of top-level jobs lists them and
// no cap counts them. A process that dies between 1 and 3 leaves a staged
// row behind: dropAbandoned (at Open and in Reconcile) deletes the
// children of a staged row untouched for WithAbandonAfter, then the row. A
// stager that comes back after that finds its row gone and fails its
// admission: it never admits a parent whose children were taken away.
//
// A batch of plain jobs larger than a chunk is admitted a chunk per
// transaction, in the same lane (see AdmitBatch).
//
// Chunks (and their deletions) are never acknowledged to anyone: they
// commit without their fsync (see writeUnacked); the admission's own
// transaction, fsynced, makes them durable with itself.
//
// Chunks are sized by time, not by count: the writer's time one chunk
// takes (chunkTime) is what every other write may wait behind it, and
// the time per row varies tenfold with the machine's load. Each chunk
// inserts the rows the previous ones' rate says fit in chunkTime, between
// minChunk and WithFanoutChunk's bound.

// defaultFanoutChunk bounds the children one write transaction stages.
const defaultFanoutChunk = 2000

// defaultBatchChunk bounds the plain jobs of a batch one write
// transaction admits.
const defaultBatchChunk = 1000

// defaultChunkTime is the writer's time one chunk of a staged admission
// aims at.
const defaultChunkTime = 5 * time.Millisecond

// minChunk is the fewest children a chunk stages (each chunk is a commit).
const minChunk = 64

// minBatchChunk is the fewest plain jobs a chunk of a batch admits: each
// chunk is a commit, and its fsync is most of a small chunk's time (a
// batch of 1,000 in 5 ms chunks took four times as long as in one).
const minBatchChunk = 250

// batchChunkTimes is the chunk time of a batch of plain jobs, in chunk
// times of a staged fan-out: a commit for fewer than minBatchChunk jobs
// costs more than it saves.
const batchChunkTimes = 4

// defaultAbandonAfter is how long a staged admission may go without a
// chunk before dropAbandoned takes it back.
const defaultAbandonAfter = 2 * time.Minute

// WithFanoutChunk sets the most children of a fan-out one write
// transaction inserts (default 2,000); the fan-outs of a batch holding
// more than a chunk are staged (see stage.go).
func WithFanoutChunk(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.fanoutChunk = n
		}
	}
}

// WithBatchChunk sets the most plain jobs of a batch one write
// transaction admits (default 1,000); a batch of more plain jobs than a
// chunk is admitted a chunk per transaction (see AdmitBatch).
func WithBatchChunk(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.batchChunk = n
		}
	}
}

// WithChunkTime sets the writer's time one chunk of a staged admission
// aims at (default 5ms): chunks are sized so that each takes about that.
// A chunk of a batch of plain jobs aims at four times that, and holds at
// least 250 jobs.
func WithChunkTime(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.chunkTime = d
		}
	}
}

// WithAbandonAfter sets how long a staged admission may go without a chunk
// before Open and Reconcile take it back as abandoned by a process that
// died (default 2m; see stage.go).
func WithAbandonAfter(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.abandonAfter = d
		}
	}
}

// chunker sizes the chunks of staged admissions by time (see above). It
// keeps the rate it learned across admissions.
type chunker struct {
	target      time.Duration
	least, most int
	rows        atomic.Int64 // the next chunk's rows
}

// newChunker sizes chunks of least to most rows (least is cut to most)
// to take target each.
func newChunker(target time.Duration, least, most int) *chunker {
	c := &chunker{target: target, least: min(least, most), most: most}
	c.rows.Store(int64(min(most, 4*c.least)))
	return c
}

// next is how many rows the next chunk inserts.
func (c *chunker) next() int { return int(c.rows.Load()) }

// took records that a chunk of n rows took d of the writer's time: the
// next chunk is sized from that rate, halfway from the last size (one
// slow chunk, a preempted process, does not shrink the next to nothing).
func (c *chunker) took(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	fit := float64(n) * float64(c.target) / float64(max(d, time.Microsecond))
	rows := (float64(c.rows.Load()) + fit) / 2
	c.rows.Store(int64(min(float64(c.most), max(float64(c.least), rows))))
}

// stageSchema is the table of staged admissions.
var stageSchema = []string{
	`CREATE TABLE IF NOT EXISTS staged (
		parent     TEXT    NOT NULL PRIMARY KEY,
		tenant     TEXT    NOT NULL,
		staged     INTEGER NOT NULL,
		touched_at INTEGER NOT NULL
	) STRICT, WITHOUT ROWID`,
}

// The statements of the staged rows.
const (
	// startStagedQuery records a new staged admission: ?3 children in.
	startStagedQuery = `INSERT INTO staged (parent, tenant, staged, touched_at) VALUES (?1, ?2, ?3, ?4)`
	// moveStagedQuery records that parent ?1 went from ?2 to ?3 staged
	// children; no row changes when someone else took it over.
	moveStagedQuery = `UPDATE staged SET staged = ?3, touched_at = ?4 WHERE parent = ?1 AND staged = ?2`
	// endStagedQuery ends a staged admission of ?2 children.
	endStagedQuery = `DELETE FROM staged WHERE parent = ?1 AND staged = ?2`
	// abandonedQuery finds the staged admissions untouched since ?1.
	abandonedQuery = `SELECT parent, tenant, staged FROM staged WHERE touched_at < ?1`
)

// stageChildrenQuery inserts a chunk of a parent's children, all held:
// the items ?12 (itemStrings) are those from index ?13 on (see
// insertChildrenQuery).
// Their payloads and inputs are their bodies (insertChildBodies).
// OR ROLLBACK: a failed insert rolls the transaction back. printf is a
// function call, so SQLite still keeps a statement journal for it (see
// valuesrow.go).
const stageChildrenQuery = `INSERT OR ROLLBACK INTO jobs (id, tenant, kind, priority, state, max_attempts,
		created_at, updated_at, next_dispatch_at, dispatch_deadline, run_at, concurrency_key,
		concurrency_limit, fair_at, parent, item_index, held, slots, weight, stall_timeout, max_runtime,
		cpu, memory)
	SELECT ?1 || '-' || printf('%06d', ?13 + key), ?2, ?3,
		?4, 'pending', ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?1, ?13 + key, 1, 0, ?14, ?15, ?16, ?17, ?18
	FROM json_each(?12)`

// unstageChildrenQuery deletes staged children ?2 to ?3 (ids) of parent ?1.
const unstageChildrenQuery = `DELETE FROM jobs WHERE id >= ?2 AND id <= ?3 AND +parent = ?1 AND held = 1 AND state = 'pending'`

// releaseStagedQuery releases the first ?2 children of parent ?1 (ids ?5
// to ?6) with fair-queue stamps ?3 + (index + 1) / ?4.
const releaseStagedQuery = `UPDATE jobs SET held = 0, fair_at = ?3 + (item_index + 1) / ?4
	WHERE id >= ?5 AND id <= ?6 AND +parent = ?1 AND item_index < ?2 AND held = 1`

// errStagingLost is a staged admission whose staged row was taken over
// (see dropAbandoned).
var errStagingLost = errors.New("the staged children were taken back (abandoned)")

// stage inserts the children of in (a parent) held, a chunk at a time,
// each chunk in its own write transaction in the bulk lane. On error the
// chunks in are deleted again.
func (s *Store) stage(ctx context.Context, in *admitInput) error {
	p := in.job
	cpu, memory := resourcesArgs(p.Resources)
	for from := 0; from < len(in.items); {
		to := min(from+s.chunks.next(), len(in.items))
		chunk := in.items[from:to]
		took, err := s.writeUnacked(ctx, store.WriteAdmit, fmt.Sprintf("stage children %d-%d of %s", from, to-1, p.ID), func(tx *sql.Tx) error {
			items := itemStrings(chunk)
			res, err := tx.ExecContext(ctx, stageChildrenQuery, p.ID, p.Tenant, p.Kind, p.Priority, p.MaxAttempts,
				p.CreatedAt.UnixNano(), ptrNanos(p.NextDispatchAt), nanos(p.DispatchDeadline), ptrNanos(p.RunAt),
				p.ConcurrencyKey, p.ConcurrencyLimit, items, from, weightArg(in.caps.Weight),
				int64(p.StallTimeout), int64(p.MaxRuntime), cpu, memory)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || int(n) != len(chunk) {
				return fmt.Errorf("%d of %d inserted (%v)", n, len(chunk), err)
			}
			if err := insertChildBodies(ctx, tx, p.ID, from, items, in.inputs); err != nil {
				return err
			}
			if from == 0 {
				_, err = tx.ExecContext(ctx, startStagedQuery, p.ID, p.Tenant, to, time.Now().UnixNano())
			} else {
				err = oneRow(tx.ExecContext(ctx, moveStagedQuery, p.ID, from, to, time.Now().UnixNano()))
			}
			if err != nil {
				return err
			}
			s.countMove(p.Tenant, "", contracts.StatePending, len(chunk))
			return nil
		})
		if err != nil {
			// The failed chunk's transaction wrote nothing.
			s.unstage(ctx, in)
			return fmt.Errorf("sqlite: stage the children of %s: %w", p.ID, err)
		}
		s.chunks.took(len(chunk), took)
		in.stagedTo, from = to, to
	}
	return nil
}

// oneRow is the error of an update that must change exactly one row:
// errStagingLost when it changed none.
func oneRow(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return errStagingLost
	}
	return nil
}

// unstage deletes the staged children of in, chunk by chunk, even when
// ctx has ended. A chunk that cannot be deleted stays, held and inert,
// until dropAbandoned finds it.
func (s *Store) unstage(ctx context.Context, in *admitInput) {
	_ = s.dropStaged(context.WithoutCancel(ctx), in.job.ID, in.job.Tenant, in.stagedTo)
	in.stagedTo = 0
}

// dropStaged deletes the first staged children of parent (of tenant),
// from the last down, a chunk per write transaction in the bulk lane,
// moving its staged row along, and the row with the last chunk. A
// staged row that someone else moved meanwhile is theirs: it stops.
func (s *Store) dropStaged(ctx context.Context, parent, tenant string, staged int) error {
	for to := staged; to > 0; {
		from := max(0, to-s.chunks.next())
		took, err := s.writeUnacked(ctx, store.WriteAdmit, "unstage children of "+parent, func(tx *sql.Tx) error {
			var err error
			if from == 0 {
				_, err = tx.ExecContext(ctx, endStagedQuery, parent, to)
			} else {
				err = oneRow(tx.ExecContext(ctx, moveStagedQuery, parent, to, from, time.Now().UnixNano()))
			}
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, unstageChildrenQuery, parent, contracts.ChildID(parent, from), contracts.ChildID(parent, to-1))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			s.countMove(tenant, contracts.StatePending, "", int(n))
			return nil
		})
		if err != nil {
			return err
		}
		s.chunks.took(to-from, took)
		to = from
	}
	return nil
}

// dropAbandoned takes back the staged admissions untouched since before:
// their children are deleted, a chunk at a time (see the top of this
// file). It returns how many children it deleted.
func (s *Store) dropAbandoned(ctx context.Context, before time.Time) (int, error) {
	type abandoned struct {
		parent, tenant string
		staged         int
	}
	var found []abandoned
	rows, err := s.r.QueryContext(ctx, abandonedQuery, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("sqlite: find abandoned staged admissions: %w", err)
	}
	for rows.Next() {
		var a abandoned
		if err := rows.Scan(&a.parent, &a.tenant, &a.staged); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("sqlite: find abandoned staged admissions: %w", err)
		}
		found = append(found, a)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("sqlite: find abandoned staged admissions: %w", err)
	}
	n := 0
	for _, a := range found {
		if err := s.dropStaged(ctx, a.parent, a.tenant, a.staged); err != nil && !errors.Is(err, errStagingLost) {
			return n, err
		}
		n += a.staged
	}
	return n, nil
}

// releaseStaged is insertChildren for a staged parent, in the admission's
// transaction: every child must be there, and the first f.parent.released
// are released from the fair-queue position f.fairFrom on.
func (s *Store) releaseStaged(ctx context.Context, tx *sql.Tx, f fanoutRows) error {
	p := f.parent.job
	if err := oneRow(tx.ExecContext(ctx, endStagedQuery, p.ID, len(f.parent.items))); err != nil {
		return fmt.Errorf("the staged children of %s: %w", p.ID, err)
	}
	if f.parent.released == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, releaseStagedQuery, p.ID, f.parent.released, f.fairFrom, weightArg(f.parent.caps.Weight),
		contracts.ChildID(p.ID, 0), contracts.ChildID(p.ID, f.parent.released-1))
	if err != nil {
		return fmt.Errorf("release the first children of %s: %w", p.ID, err)
	}
	return nil
}
