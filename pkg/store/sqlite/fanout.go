package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Fan-out. A parent and all its children are inserted in the admission's
// transaction. The first min(window, items) children are released: they
// are ordinary ready jobs. The others are held (held = 1: out of the ready
// queue and of every sweep) until a released child ends: the transaction
// that moves a child to a final state counts it on its parent and releases
// the next held child, so a parent never has more than its window of
// released children that have not ended, and so never more running. The
// parent itself is held too (dispatch never offers it): it goes running
// with its first child's start and ends, in the transaction of its last
// child's end, succeeded, failed or cancelled.
//
// children_released is the index of the next child to release: children
// below it were released (or ended while held), those at or above it are
// held.

// fanoutRows is a parent being admitted with its items, and where its
// children released at once start in the tenant's fair queue: the k-th
// (from 1) gets fairFrom + k/weight, as store.FairAt would stamp them one
// after the other.
type fanoutRows struct {
	parent   admitInput
	fairFrom float64
}

// insertChildrenQuery inserts every child of a parent in one statement,
// one row per element of ?15, a JSON array of strings that each hold one
// item's JSON text, made the child's payload as it is: ?12 children
// released with fair-queue stamps ?13 + k/?14, the others held. Binding
// ten columns of every child instead costs more than the inserts
// themselves. The items are strings, not JSON values, because json_each
// hands a number over as an SQL INTEGER or REAL, which re-encodes it
// (12345678901234567890 came back 1.2345678901234567e+19, -0 as 0, 1e400
// as Inf, which is not JSON).
// The children's payloads and inputs are their bodies
// (insertChildBodies).
// OR ROLLBACK: a failed insert rolls the transaction back. printf is a
// function call, so SQLite still keeps a statement journal for it (see
// valuesrow.go).
const insertChildrenQuery = `INSERT OR ROLLBACK INTO jobs (id, tenant, kind, priority, state, max_attempts,
		created_at, updated_at, next_dispatch_at, dispatch_deadline, run_at, concurrency_key,
		concurrency_limit, fair_at, parent, item_index, held, slots, weight, stall_timeout, max_runtime,
		cpu, memory)
	SELECT ?1 || '-' || printf('%06d', key), ?2, ?3,
		?4, 'pending', ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11,
		CASE WHEN key < ?12 THEN ?13 + (key + 1) / ?14 ELSE 0 END,
		?1, key, CASE WHEN key < ?12 THEN 0 ELSE 1 END, 0, ?14, ?16, ?17, ?18, ?19
	FROM json_each(?15)`

// itemStrings is items as one JSON array of strings, each holding one
// item's JSON text: the argument of json_each in insertChildrenQuery and
// stageChildrenQuery, whose value is then the item exactly as it came.
func itemStrings(items []json.RawMessage) []byte {
	size := 2
	for _, it := range items {
		size += len(it) + 3
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, string(it))
	}
	return append(out, ']')
}

// insertChildren inserts a parent's children: the first f.released
// released from the fair-queue position f.fairFrom on, the others held.
func (s *Store) insertChildren(ctx context.Context, tx *sql.Tx, f fanoutRows) error {
	p := f.parent.job
	items := itemStrings(f.parent.items)
	cpu, memory := resourcesArgs(p.Resources)
	res, err := tx.ExecContext(ctx, insertChildrenQuery, p.ID, p.Tenant, p.Kind, p.Priority, p.MaxAttempts,
		p.CreatedAt.UnixNano(), ptrNanos(p.NextDispatchAt), nanos(p.DispatchDeadline), ptrNanos(p.RunAt),
		p.ConcurrencyKey, p.ConcurrencyLimit, f.parent.released, f.fairFrom, weightArg(f.parent.caps.Weight),
		string(items), int64(p.StallTimeout), int64(p.MaxRuntime), cpu, memory)
	if err != nil {
		return fmt.Errorf("insert the children of %s: %w", p.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || int(n) != len(f.parent.items) {
		return fmt.Errorf("insert the children of %s: %d of %d inserted (%v)", p.ID, n, len(f.parent.items), err)
	}
	if err := insertChildBodies(ctx, tx, p.ID, 0, items, f.parent.inputs); err != nil {
		return err
	}
	s.countMove(p.Tenant, "", contracts.StatePending, len(f.parent.items))
	return nil
}

// parentRow is what a child's end reads and writes of its parent: what
// the fan-out rules read (store.FanoutParent) and what applying their
// change sets needs besides. The rows a write transaction read are kept
// until its commit (txParents), so that the children of one parent that
// end in one group commit read and write their parent once.
type parentRow struct {
	store.FanoutParent
	dirty  bool // counts or cursor changed since read
	tenant string
	weight float64
	// wait is how long a released child may wait for a worker
	// (store.FanoutWait).
	wait time.Duration
	// op is what the write that last changed it counts as: its row,
	// written at the commit, counts under it (rows.go).
	op store.WriteOp
}

// The statements of a fan-out.
const (
	parentRowQuery = `SELECT tenant, state, window_size, children_released, children_total,
			children_succeeded, children_failed, children_cancelled, fail_fast, cancel_requested,
			weight, dispatch_deadline, created_at, run_at
		FROM jobs WHERE id = ? AND window_size > 0`
	writeParentQuery = `UPDATE jobs SET children_released = ?, children_succeeded = ?,
			children_failed = ?, children_cancelled = ?
		WHERE id = ?`
	// releaseQuery releases a held child: it joins the ready queue with
	// its fair-queue stamp and a dispatch deadline from now.
	releaseQuery = `UPDATE jobs SET held = 0, fair_at = ?, dispatch_deadline = ?, updated_at = ?
		WHERE id = ? AND state = 'pending' AND held = 1`
	// finishParentQuery ends a parent.
	finishParentQuery = `UPDATE jobs SET state = ?, error = ?, result = ?, progress = NULL,
			finished_at = ?, updated_at = ?, claim_until = NULL, next_dispatch_at = NULL,
			children_released = ?, children_succeeded = ?, children_failed = ?, children_cancelled = ?
		WHERE id = ? AND state IN ('pending', 'running')`
	// startParentQuery marks a parent running at its first child's start.
	startParentQuery = `UPDATE jobs SET state = 'running', started_at = ?, updated_at = ?
		WHERE id = ? AND state = 'pending'`
	// cancelWaitingQuery ends a parent's pending children (held, ready or
	// claimed) cancelled.
	cancelWaitingQuery = `UPDATE jobs INDEXED BY jobs_children
		SET state = 'cancelled', error = ?, finished_at = ?, updated_at = ?,
			claim_until = NULL, next_dispatch_at = NULL
		WHERE parent = ? AND parent != '' AND state = 'pending'`
	// requestCancelQuery asks a parent's running children to stop.
	requestCancelQuery = `UPDATE jobs INDEXED BY jobs_children
		SET cancel_requested = 1, updated_at = ?
		WHERE parent = ? AND parent != '' AND state = 'running' AND cancel_requested = 0`
	runningChildrenQuery = `SELECT ` + jobColumns + ` FROM jobs INDEXED BY jobs_children` + bodyJoin + `
		WHERE parent = ? AND parent != '' AND state = 'running' ORDER BY id`
	countRunningQuery = `SELECT count(*) FROM jobs INDEXED BY jobs_children
		WHERE parent = ? AND parent != '' AND state = 'running'`
	failedChildrenQuery = `SELECT id, item_index FROM jobs INDEXED BY jobs_children
		WHERE parent = ? AND parent != '' AND state = 'failed' ORDER BY id LIMIT ?`
	// purgeChildrenQuery deletes the children of parent ?1: ids in the
	// range (?2, ?3), see contracts.ChildID.
	purgeChildrenQuery = `DELETE FROM jobs WHERE id > ?2 AND id < ?3 AND +parent = ?1 RETURNING tenant, state`
)

// txParents are the parent rows of the open write transaction. Only the
// write loop touches them.
type txParents map[string]*parentRow

// parent returns a child's parent as the open transaction sees it, or
// sql.ErrNoRows.
func (s *Store) parent(ctx context.Context, tx *sql.Tx, id string) (*parentRow, error) {
	if p, ok := s.parents[id]; ok {
		return p, nil
	}
	p := &parentRow{FanoutParent: store.FanoutParent{ID: id}}
	var (
		state            string
		failFast, cancel int64
		deadline, runAt  sql.NullInt64
		created          int64
	)
	err := tx.StmtContext(ctx, s.ws.parentRow).QueryRowContext(ctx, id).Scan(&p.tenant, &state, &p.Window, &p.Released,
		&p.Counts.Total, &p.Counts.Succeeded, &p.Counts.Failed, &p.Counts.Cancelled, &failFast, &cancel,
		&p.weight, &deadline, &created, &runAt)
	if err != nil {
		return nil, err
	}
	p.State = contracts.JobState(state)
	p.FailFast, p.CancelRequested = failFast != 0, cancel != 0
	var dl time.Time
	if deadline.Valid {
		dl = fromNanos(deadline.Int64)
	}
	var ra *time.Time
	if runAt.Valid {
		t := fromNanos(runAt.Int64)
		ra = &t
	}
	p.wait = store.FanoutWait(dl, fromNanos(created), ra)
	if s.parents == nil {
		s.parents = txParents{}
	}
	s.parents[id] = p
	return p, nil
}

// flushParents writes the counts and cursors the open transaction changed.
func (s *Store) flushParents(ctx context.Context, tx *sql.Tx) error {
	for _, p := range s.parents {
		if !p.dirty {
			continue
		}
		s.rows.op = p.op
		_, err := tx.StmtContext(ctx, s.ws.writeParent).ExecContext(ctx, p.Released, p.Counts.Succeeded, p.Counts.Failed, p.Counts.Cancelled, p.ID)
		if err != nil {
			return fmt.Errorf("write parent %s: %w", p.ID, err)
		}
		p.dirty = false
	}
	return nil
}

// childEnded applies, in the transaction that moved child to the final
// state st, what store.EndChild decides of its parent (read in the same
// transaction), then store.FinishParent.
func (s *Store) childEnded(ctx context.Context, tx *sql.Tx, child contracts.Job, st contracts.JobState, now time.Time) error {
	p, err := s.parent(ctx, tx, child.Parent)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read parent %s: %w", child.Parent, err)
	}
	var view store.FanoutParent
	if found {
		view = p.FanoutParent
	}
	// Children at or past the cursor were never released: one that ends
	// (a cancel) held no place in the window.
	held := child.Index != nil && *child.Index >= view.Released
	step := store.EndChild(view, found, child.ID, held, st, now)
	if step.Count == "" {
		return nil // a parent purged first, or one that ended
	}
	return s.applyFanout(ctx, tx, p, step, now)
}

// applyFanout applies a fan-out rule's change set to p in the open
// transaction, then ends p when store.FinishParent says so.
func (s *Store) applyFanout(ctx context.Context, tx *sql.Tx, p *parentRow, step store.FanoutStep, now time.Time) error {
	p.dirty, p.op = true, s.rows.op
	p.FanoutParent = step.Apply(p.FanoutParent, 0)
	if step.RequestCancel {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE id = ?`,
			now.UnixNano(), p.ID); err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
	}
	if step.CancelWaiting != nil {
		if err := s.cancelWaiting(ctx, tx, p, *step.CancelWaiting); err != nil {
			return err
		}
	}
	if step.ReleaseNext {
		if err := s.releaseNext(ctx, tx, p, now); err != nil {
			return err
		}
	}
	return s.finishParentIfDone(ctx, tx, p, now)
}

// releaseNext releases the parent's next held child still pending (one
// cancelled while held is stepped over), with the next stamp of the
// tenant's fair queue and a dispatch deadline store.FanoutWait from now.
func (s *Store) releaseNext(ctx context.Context, tx *sql.Tx, p *parentRow, now time.Time) error {
	for p.Released < p.Counts.Total {
		id := contracts.ChildID(p.ID, p.Released)
		p.Released++
		g, err := s.counter(ctx, tx, store.GlobalScope)
		if err != nil {
			return err
		}
		t, err := s.counter(ctx, tx, store.TenantScope(p.tenant))
		if err != nil {
			return err
		}
		fair := store.FairAt(g.fair, t.fair, p.weight)
		res, err := tx.StmtContext(ctx, s.ws.release).ExecContext(ctx, fair, now.Add(p.wait).UnixNano(), now.UnixNano(), id)
		if err != nil {
			return fmt.Errorf("release child %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			t.fair, t.fairSet = fair, true
			return nil
		}
	}
	return nil
}

// cancelWaiting ends every pending child of p with ch
// (store.CancelWaitingChange, as one statement), counts them on p and
// asks its running children to stop (store.RequestCancelChange); nothing
// is released any more (the rule moved p's cursor to the end).
func (s *Store) cancelWaiting(ctx context.Context, tx *sql.Tx, p *parentRow, ch store.Change) error {
	at := ch.Now.UnixNano()
	res, err := tx.ExecContext(ctx, cancelWaitingQuery, *ch.Error, at, at, p.ID)
	if err != nil {
		return fmt.Errorf("cancel the waiting children of %s: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("cancel the waiting children of %s: %w", p.ID, err)
	}
	s.countMove(p.tenant, contracts.StatePending, contracts.StateCancelled, int(n))
	p.Counts.Cancelled += int(n)
	if _, err := tx.ExecContext(ctx, requestCancelQuery, at, p.ID); err != nil {
		return fmt.Errorf("cancel the running children of %s: %w", p.ID, err)
	}
	return nil
}

// finishParentIfDone ends the parent as store.FinishParent says, when it
// says so, and frees its admission slots.
func (s *Store) finishParentIfDone(ctx context.Context, tx *sql.Tx, p *parentRow, now time.Time) error {
	if !p.Counts.Done() || p.State.Final() {
		return nil
	}
	var failed []string
	rows, err := tx.QueryContext(ctx, failedChildrenQuery, p.ID, contracts.MaxFailedChildren)
	if err != nil {
		return fmt.Errorf("read the failed children of %s: %w", p.ID, err)
	}
	if err := scanAll(rows, func(id string, _ int) { failed = append(failed, id) }); err != nil {
		return fmt.Errorf("read the failed children of %s: %w", p.ID, err)
	}
	end, ok := store.FinishParent(p.FanoutParent, failed)
	if !ok {
		return nil
	}
	at := now.UnixNano()
	r, err := tx.ExecContext(ctx, finishParentQuery, string(end.State), end.Error, string(end.Result), at, at,
		p.Released, end.Counts.Succeeded, end.Counts.Failed, end.Counts.Cancelled, p.ID)
	if err != nil {
		return fmt.Errorf("finish parent %s: %w", p.ID, err)
	}
	if n, _ := r.RowsAffected(); n == 1 {
		s.release(p.tenant, contracts.ParentSlots(p.Window, p.Counts.Total), contracts.JobItems(p.Counts.Total))
		s.countMove(p.tenant, p.State, end.State, 1)
		p.State = end.State
	}
	return nil
}

// startParent marks a child's parent (of tenant) running
// (store.StartParentChange) when it is still pending.
func (s *Store) startParent(ctx context.Context, tx *sql.Tx, tenant, parent string, now time.Time) error {
	ch := store.StartParentChange(now)
	res, err := tx.StmtContext(ctx, s.ws.startParent).ExecContext(ctx, ch.StartedAt.UnixNano(), ch.Now.UnixNano(), parent)
	if err != nil {
		return fmt.Errorf("start parent %s: %w", parent, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("start parent %s: %w", parent, err)
	} else if n > 0 {
		s.countMove(tenant, contracts.StatePending, ch.State, int(n))
	}
	return nil
}

// CancelParent cancels a fan-out parent in one write transaction (see
// store.Store): it applies store.CancelFanout to the parent as read.
func (s *Store) CancelParent(ctx context.Context, id string, now time.Time, reason string) (contracts.Job, []contracts.Job, error) {
	if now.IsZero() {
		now = time.Now()
	}
	var (
		out     contracts.Job
		running []contracts.Job
	)
	err := s.write(ctx, store.WriteCancel, "cancel parent "+id, func(tx *sql.Tx) error {
		running = nil
		p, err := s.parent(ctx, tx, id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := s.jobIn(ctx, tx, id); errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			return fmt.Errorf("job %s is not a fan-out parent: %w", id, store.ErrBadTransition)
		case err != nil:
			return fmt.Errorf("read parent: %w", err)
		}
		if step, ok := store.CancelFanout(p.FanoutParent, reason, now); ok {
			if err := s.applyFanout(ctx, tx, p, step, now); err != nil {
				return err
			}
			if err := s.flushParents(ctx, tx); err != nil {
				return err
			}
			rows, err := tx.QueryContext(ctx, runningChildrenQuery, id)
			if err != nil {
				return fmt.Errorf("read running children: %w", err)
			}
			if running, err = scanJobs(rows); err != nil {
				return fmt.Errorf("read running children: %w", err)
			}
		}
		j, err := s.jobIn(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		out = j
		return s.countRunning(ctx, tx, &out)
	})
	if err != nil {
		return contracts.Job{}, nil, err
	}
	return out, running, nil
}

// countRunning completes a parent's counts with its running children
// (store.ChildCountsWith; scanJob counts them as pending); other jobs are
// left alone.
func (s *Store) countRunning(ctx context.Context, q querier, j *contracts.Job) error {
	if j.Children == nil || j.State.Final() {
		return nil
	}
	var n int
	if err := q.QueryRowContext(ctx, countRunningQuery, j.ID).Scan(&n); err != nil {
		return fmt.Errorf("count the running children of %s: %w", j.ID, err)
	}
	c := store.ChildCountsWith(*j.Children, n)
	j.Children = &c
	return nil
}

// querier runs a query in a transaction or a pool.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// purgeChildren deletes the children of a purged parent and says how many
// went.
func (s *Store) purgeChildren(ctx context.Context, tx *sql.Tx, parent string) (int, error) {
	rows, err := tx.QueryContext(ctx, purgeChildrenQuery, parent, parent+"-", parent+".")
	if err != nil {
		return 0, fmt.Errorf("purge the children of %s: %w", parent, err)
	}
	n, err := s.countDeleted(rows)
	if err != nil {
		return 0, fmt.Errorf("purge the children of %s: %w", parent, err)
	}
	return n, nil
}

// countDeleted records the deletes of the (tenant, state) rows a DELETE
// returned and says how many there were.
func (s *Store) countDeleted(rows *sql.Rows) (int, error) {
	defer func() { _ = rows.Close() }()
	n := 0
	for rows.Next() {
		var tenant, state string
		if err := rows.Scan(&tenant, &state); err != nil {
			return n, err
		}
		s.countMove(tenant, contracts.JobState(state), "", 1)
		n++
	}
	return n, rows.Err()
}
