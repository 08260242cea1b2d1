package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Transition applies ch to the job while it is still at exp.State and
// exp.Attempt (and, when exp.ClaimFreeAt is set, holds no claim lasting past
// it), in one write transaction, and returns the job as it is afterwards.
//
// Nil fields of ch keep their value; ClearClaim wins over ClaimUntil. On a
// final state the job's finished_at becomes ch.Now, its claim and
// next_dispatch_at are cleared and its admission slot is released (its key
// stays on the row but no longer blocks a new job). A zero ch.Now is taken
// as the current time.
//
// A change the state machine forbids, or an Attempt that does not grow, is
// store.ErrBadTransition and touches nothing. A miss is store.ErrNotFound
// when no job has that id and store.ErrConflict otherwise.
func (s *Store) Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error) {
	op := "transition job " + exp.ID
	if err := ch.Check(exp); err != nil {
		return contracts.Job{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if ch.Now.IsZero() {
		ch.Now = time.Now()
	}
	query, args, err := buildUpdate(exp, ch, 0)
	if err != nil {
		return contracts.Job{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}

	cached, err := s.wc.get(ctx, query)
	if err != nil {
		return contracts.Job{}, fmt.Errorf("sqlite: %s: prepare: %w", op, err)
	}

	var out contracts.Job
	err = s.write(ctx, store.WriteTransition, op, func(tx *sql.Tx) error {
		if err := execCAS(ctx, tx, cached, query, args, exp); err != nil {
			return err
		}
		// Read back in the same transaction (cheaper than RETURNING, which
		// goes through a temporary table).
		j, err := s.jobIn(ctx, tx, exp.ID)
		if err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		if err := s.followUp(ctx, tx, j, exp, ch); err != nil {
			return err
		}
		out = j
		return nil
	})
	if err != nil {
		return contracts.Job{}, err
	}
	return out, nil
}

// Update reads the job, asks decide for a change and applies it, all in
// one write transaction: the write lock keeps the row as read until the
// UPDATE, which still compares the state and attempt read. The job
// afterwards is the change applied to the row read (store.Change.Apply),
// so nothing is read back.
func (s *Store) Update(ctx context.Context, id string, decide store.Decide) (contracts.Job, error) {
	var (
		out   contracts.Job
		query string
	)
	err := s.writeUrgent(ctx, store.WriteUpdate, "update job "+id, func(tx *sql.Tx) error {
		before, rowid, err := s.jobRowIn(ctx, tx, id)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		out, query, err = s.updateRow(ctx, tx, before, rowid, decide)
		return err
	})
	s.warm(ctx, query)
	if err != nil {
		return contracts.Job{}, err
	}
	return out, nil
}

// UpdateEach is Update of many jobs in one write transaction (see
// store.Store): one query reads them all, then each is decided in turn
// and changed by the rowid read, the changes of one shape together in one
// statement (see changegroup.go). A job that fails as Update would
// (missing, decided against, a forbidden change) leaves the others be.
func (s *Store) UpdateEach(ctx context.Context, ids []string, decide store.DecideEach) ([]store.Updated, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var (
		out     []store.Updated
		queries []string
	)
	err := s.writeUrgent(ctx, store.WriteUpdate, fmt.Sprintf("update %d jobs", len(ids)), func(tx *sql.Tx) error {
		out, queries = make([]store.Updated, len(ids)), queries[:0]
		rows, err := s.jobRowsIn(ctx, tx, ids)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		var groups changeGroups
		for i, id := range ids {
			row, ok := rows[id]
			if !ok {
				out[i].Err = fmt.Errorf("sqlite: update job %s: %w", id, store.ErrNotFound)
				continue
			}
			alone := !groupable(row.job)
			if alone || groups.holds(id) {
				// In its place: after the changes grouped before it (a
				// job met again is decided as its first change left it).
				if queries, err = s.flushGroups(ctx, tx, &groups, out, queries); err != nil {
					return err
				}
			}
			exp, ch, err := decideChange(row.job, func(j contracts.Job) (store.Change, error) { return decide(i, j) })
			if err != nil {
				// Decided against or forbidden: nothing to write.
				out[i].Err = fmt.Errorf("sqlite: update job %s: %w", id, err)
				continue
			}
			c := grouped{i: i, row: row, exp: exp, ch: ch}
			if !alone {
				if err := groups.add(c); err != nil {
					return fmt.Errorf("job %s: %w", id, err)
				}
				continue
			}
			groups.moved = true // its follow-up may move other rows
			query, err := s.applyChange(ctx, tx, row.job, row.rowid, exp, ch)
			if query != "" {
				queries = append(queries, query)
			}
			if err := s.changed(c, err, out); err != nil {
				return err
			}
		}
		queries, err = s.flushGroups(ctx, tx, &groups, out, queries)
		return err
	})
	for _, q := range slices.Compact(queries) { // most results of a message share one
		s.warm(ctx, q)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// updateRow asks decide for a change of before, the job read at rowid in
// tx, and applies it as a compare-and-set on the state and attempt read.
// It returns the job afterwards and the UPDATE it ran.
func (s *Store) updateRow(ctx context.Context, tx *sql.Tx, before contracts.Job, rowid int64, decide store.Decide) (contracts.Job, string, error) {
	exp, ch, err := decideChange(before, decide)
	if err != nil {
		return contracts.Job{}, "", err
	}
	query, err := s.applyChange(ctx, tx, before, rowid, exp, ch)
	if err != nil {
		return contracts.Job{}, query, err
	}
	return ch.Apply(before), query, nil
}

// decideChange asks decide for a change of before and checks it: the
// compare-and-set it is (on the state and claim read) and the change,
// its time set.
func decideChange(before contracts.Job, decide store.Decide) (store.Expect, store.Change, error) {
	ch, err := decide(before)
	if err != nil {
		return store.Expect{}, store.Change{}, errDecided{err}
	}
	exp := store.Expect{ID: before.ID, State: before.State, Claim: before.Claim}
	if err := ch.Check(exp); err != nil {
		return store.Expect{}, store.Change{}, err
	}
	if ch.Now.IsZero() {
		ch.Now = time.Now()
	}
	return exp, ch, nil
}

// applyChange applies ch to before, the job read at rowid in tx, as a
// compare-and-set on exp, with what it brings (followUp), and returns the
// UPDATE it ran.
func (s *Store) applyChange(ctx context.Context, tx *sql.Tx, before contracts.Job, rowid int64, exp store.Expect, ch store.Change) (string, error) {
	query, args, err := buildUpdate(exp, ch, rowid)
	if err != nil {
		return "", err
	}
	// A statement not prepared yet is prepared for this transaction alone
	// (the cache cannot prepare on the busy writer), and cached by warm
	// for the next time.
	if err := execCAS(ctx, tx, s.wc.lookup(query), query, args, exp); err != nil {
		return query, err
	}
	return query, s.followUp(ctx, tx, before, exp, ch)
}

// warm prepares an UPDATE updateRow ran into the cache, outside the write
// transaction; a failure only costs a parse next time.
func (s *Store) warm(ctx context.Context, query string) {
	if query != "" && s.wc.lookup(query) == nil {
		_, _ = s.wc.get(ctx, query)
	}
}

// followUp does, in the same transaction, what a change of job from exp
// brings with it: a job that ends frees its admission slots, a child that
// ends counts on its parent (childEnded), a child that starts starts its
// parent.
func (s *Store) followUp(ctx context.Context, tx *sql.Tx, job contracts.Job, exp store.Expect, ch store.Change) error {
	s.countMove(job.Tenant, exp.State, ch.State, 1)
	if ch.State.Final() && exp.State.Active() {
		s.release(job.Tenant, job.Slots(), job.HeldItems())
		if job.IsChild() {
			return s.childEnded(ctx, tx, job, ch.State, ch.Now)
		}
	}
	if ch.State == contracts.StateRunning && exp.State == contracts.StatePending && job.IsChild() {
		return s.startParent(ctx, tx, job.Tenant, job.Parent, ch.Now)
	}
	return nil
}

// errDecided carries a Decide error through the write loop, which must see
// it as one that wrote nothing; it unwraps to the Decide error.
type errDecided struct{ err error }

func (e errDecided) Error() string { return e.err.Error() }
func (e errDecided) Unwrap() error { return e.err }

// buildUpdate turns a compare-and-set into one UPDATE statement. A rowid
// above 0 is that of the job's row read in the same write transaction: the
// statement finds the row by it instead of by id.
func buildUpdate(exp store.Expect, ch store.Change, rowid int64) (string, []any, error) {
	sets, args, err := updateSets(ch)
	if err != nil {
		return "", nil, err
	}
	key, keyArg := "id", any(exp.ID)
	if rowid > 0 {
		key, keyArg = "rowid", rowid
	}
	where := key + ` = ? AND state = ? AND attempt = ?`
	args = append(args, keyArg, string(exp.State), exp.Claim)
	if !exp.ClaimFreeAt.IsZero() {
		where += ` AND (claim_until IS NULL OR claim_until <= ?)`
		args = append(args, exp.ClaimFreeAt.UnixNano())
	}
	// OR ROLLBACK: a failed update ends the whole transaction, as the
	// write loop would (write.go rolls the batch back and runs its other
	// requests again alone). Every caller returns a failed UPDATE's error
	// at once, so nothing runs after it in the transaction SQLite has
	// ended; a miss (no row matched) is no failure, and explainMiss reads
	// the row in the transaction still open. An UPDATE of one row keeps no
	// statement journal either way; one of many rows keeps none only so
	// (see claimQuery and changegroup.go).
	query := `UPDATE OR ROLLBACK jobs SET ` + sets + ` WHERE ` + where
	return query, args, nil
}

// updateSets is the SET list of the UPDATE that makes ch, each "?" in it
// one of args in order. Changes of the same shape (the same fields set)
// have the same list.
func updateSets(ch store.Change) (string, []any, error) {
	var (
		sets []string
		args []any
	)
	set := func(expr string, v ...any) {
		sets = append(sets, expr)
		args = append(args, v...)
	}
	final := ch.State.Final()

	set("state = ?", string(ch.State))
	set("updated_at = ?", ch.Now.UnixNano())
	if ch.Claim != 0 {
		set("attempt = ?", ch.Claim)
	}
	if ch.IncAttempt {
		set("runs = runs + 1")
	}
	if ch.Worker != nil {
		set("worker = ?", *ch.Worker)
	}
	if ch.Unstart {
		set("runs = runs - 1")
		set("worker = ''")
		set("started_at = NULL")
		set("heartbeat_at = NULL")
	}
	switch {
	case final || ch.ClearClaim:
		set("claim_until = NULL")
	case ch.ClaimUntil != nil:
		set("claim_until = ?", ptrNanos(ch.ClaimUntil))
	}
	switch {
	case final:
		set("next_dispatch_at = NULL")
		set("finished_at = ?", ch.Now.UnixNano())
	case ch.NextDispatchAt != nil:
		set("next_dispatch_at = ?", ptrNanos(ch.NextDispatchAt))
	}
	if ch.StartedAt != nil {
		set("started_at = ?", ptrNanos(ch.StartedAt))
	}
	if ch.HeartbeatAt != nil {
		set("heartbeat_at = ?", ptrNanos(ch.HeartbeatAt))
	}
	if ch.Error != nil {
		set("error = ?", *ch.Error)
	}
	if len(ch.Result) > 0 {
		set("result = ?", string(ch.Result))
	}
	if ch.Progress != nil {
		p, err := progressArg(ch.Progress)
		if err != nil {
			return "", nil, err
		}
		set("progress = ?", p)
	}
	if ch.CancelRequested != nil {
		set("cancel_requested = ?", boolArg(*ch.CancelRequested))
	}
	if ch.Errors != nil {
		e, err := runErrorsArg(ch.Errors)
		if err != nil {
			return "", nil, err
		}
		set("errors = ?", e)
	}
	if ch.Usage != nil {
		u, err := usageArg(ch.Usage)
		if err != nil {
			return "", nil, err
		}
		set("usage = ?", u)
	}

	return strings.Join(sets, ", "), args, nil
}

// execCAS runs a compare-and-set UPDATE (st, or query prepared for tx
// alone when st is nil) and explains a miss.
func execCAS(ctx context.Context, tx *sql.Tx, st *sql.Stmt, query string, args []any, exp store.Expect) error {
	update, err := stmtIn(ctx, tx, st, query)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	res, err := update.ExecContext(ctx, args...)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update: %w", err)
	} else if n == 0 {
		return explainMiss(ctx, tx, exp)
	}
	return nil
}

// explainMiss says why a compare-and-set on exp matched no row.
func explainMiss(ctx context.Context, tx *sql.Tx, exp store.Expect) error {
	var (
		state   string
		attempt int64
		claim   sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, `SELECT state, attempt, claim_until FROM jobs WHERE id = ?`, exp.ID).
		Scan(&state, &attempt, &claim)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return fmt.Errorf("read job after a miss: %w", err)
	case contracts.JobState(state) == exp.State && attempt == exp.Claim && claim.Valid:
		return fmt.Errorf("claim held until %s, past %s: %w",
			fromNanos(claim.Int64).Format(time.RFC3339Nano), exp.ClaimFreeAt.UTC().Format(time.RFC3339Nano), store.ErrConflict)
	default:
		return fmt.Errorf("job is %s at attempt %d, expected %s at %d: %w",
			state, attempt, exp.State, exp.Claim, store.ErrConflict)
	}
}
