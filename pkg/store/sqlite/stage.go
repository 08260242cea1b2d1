package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Staged fan-outs. The admission of a parent and its children is one
// write transaction, and the store has one writer: a fan-out of 100,000
// items held it for about a second, and every other tenant's write waited.
// The parents of a batch holding more children than the store's chunk
// (WithFanoutChunk) are admitted in steps instead:
//
//  1. its children are inserted held (held = 1: out of the ready queue
//     and every sweep), chunk by chunk, each chunk its own write
//     transaction, so other writes go in between;
//  2. the admission's transaction checks the caps and the dedup key as
//     for any job, checks every child is there, inserts the parent and
//     releases its first window of children: only then is the fan-out
//     visible (its parent) and dispatchable (its children);
//  3. a fan-out that was not admitted (rejected, joined, or an error) has
//     its children deleted again, chunk by chunk.
//
// Until step 2 no one knows the children's ids (the parent's id is the
// gateway's, not yet answered), no query of top-level jobs lists them and
// no cap counts them. A process that dies between 1 and 3 leaves them
// held for good: inert, but still rows.

// defaultFanoutChunk is the children one write transaction stages: about
// 40 ms of the writer on a busy 2-core machine.
const defaultFanoutChunk = 2000

// WithFanoutChunk sets how many children of a fan-out one write
// transaction inserts (default 2,000); the fan-outs of a batch holding
// more are staged (see stage.go).
func WithFanoutChunk(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.fanoutChunk = n
		}
	}
}

// stageChildrenQuery inserts a chunk of a parent's children, all held:
// the items ?12 (itemStrings) are those from index ?13 on (see
// insertChildrenQuery).
const stageChildrenQuery = `INSERT INTO jobs (id, tenant, kind, payload, priority, state, max_attempts,
		created_at, updated_at, next_dispatch_at, dispatch_deadline, run_at, concurrency_key,
		concurrency_limit, fair_at, parent, item_index, held, slots, weight, stall_timeout, max_runtime, inputs)
	SELECT ?1 || '-' || printf('%06d', ?13 + key), ?2, ?3,
		value,
		?4, 'pending', ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?1, ?13 + key, 1, 0, ?14, ?15, ?16, ?17
	FROM json_each(?12)`

// unstageChildrenQuery deletes staged children ?2 to ?3 (ids) of parent ?1.
const unstageChildrenQuery = `DELETE FROM jobs WHERE id >= ?2 AND id <= ?3 AND +parent = ?1 AND held = 1 AND state = 'pending'`

// countStagedQuery counts a parent's children.
const countStagedQuery = `SELECT count(*) FROM jobs INDEXED BY jobs_children WHERE parent = ?1 AND parent != ''`

// releaseStagedQuery releases the first ?2 children of parent ?1 (ids ?5
// to ?6) with fair-queue stamps ?3 + (index + 1) / ?4.
const releaseStagedQuery = `UPDATE jobs SET held = 0, fair_at = ?3 + (item_index + 1) / ?4
	WHERE id >= ?5 AND id <= ?6 AND +parent = ?1 AND item_index < ?2 AND held = 1`

// stage inserts the children of in (a parent) held, s.chunk at a time,
// each chunk in its own write transaction. On error the chunks in are
// deleted again.
func (s *Store) stage(ctx context.Context, in *admitInput) error {
	p := in.job
	for from := 0; from < len(in.items); from += s.chunk {
		to := min(from+s.chunk, len(in.items))
		chunk := in.items[from:to]
		err := s.write(ctx, store.WriteAdmit, fmt.Sprintf("stage children %d-%d of %s", from, to-1, p.ID), func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, stageChildrenQuery, p.ID, p.Tenant, p.Kind, p.Priority, p.MaxAttempts,
				p.CreatedAt.UnixNano(), ptrNanos(p.NextDispatchAt), nanos(p.DispatchDeadline), ptrNanos(p.RunAt),
				p.ConcurrencyKey, p.ConcurrencyLimit, itemStrings(chunk), from, weightArg(in.caps.Weight),
				int64(p.StallTimeout), int64(p.MaxRuntime), in.inputs)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || int(n) != len(chunk) {
				return fmt.Errorf("%d of %d inserted (%v)", n, len(chunk), err)
			}
			s.countMove(p.Tenant, "", contracts.StatePending, len(chunk))
			return nil
		})
		if err != nil {
			in.stagedTo = to // what may be in: unstage finds out
			s.unstage(ctx, in)
			return fmt.Errorf("sqlite: stage the children of %s: %w", p.ID, err)
		}
		in.stagedTo = to
	}
	return nil
}

// unstage deletes the staged children of in, chunk by chunk, even when
// ctx has ended. A chunk that cannot be deleted stays, held and inert.
func (s *Store) unstage(ctx context.Context, in *admitInput) {
	ctx = context.WithoutCancel(ctx)
	p := in.job
	for from := 0; from < in.stagedTo; from += s.chunk {
		to := min(from+s.chunk, in.stagedTo)
		_ = s.write(ctx, store.WriteAdmit, "unstage children of "+p.ID, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, unstageChildrenQuery, p.ID, contracts.ChildID(p.ID, from), contracts.ChildID(p.ID, to-1))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			s.countMove(p.Tenant, contracts.StatePending, "", int(n))
			return nil
		})
	}
	in.stagedTo = 0
}

// releaseStaged is insertChildren for a staged parent, in the admission's
// transaction: every child must be there, and the first f.parent.released
// are released from the fair-queue position f.fairFrom on.
func (s *Store) releaseStaged(ctx context.Context, tx *sql.Tx, f fanoutRows) error {
	p := f.parent.job
	var n int
	if err := tx.QueryRowContext(ctx, countStagedQuery, p.ID).Scan(&n); err != nil {
		return fmt.Errorf("count the staged children of %s: %w", p.ID, err)
	}
	if n != len(f.parent.items) {
		return fmt.Errorf("the staged children of %s: %d of %d are there", p.ID, n, len(f.parent.items))
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
