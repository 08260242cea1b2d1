package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/stale"
)

// Batch sizes used when a caller gives none.
const (
	// DefaultStaleLimit is the number of jobs Stale returns when q.Limit is 0.
	DefaultStaleLimit = 100
	// DefaultPurgeLimit is the number of jobs Purge deletes when limit is 0.
	DefaultPurgeLimit = 1000
)

// The reaper's queries; each is a range scan of its partial index, named
// with INDEXED BY because the planner has no statistics to choose it.
const (
	// staleBeatQuery: running jobs whose last sign of life is older than ?.
	staleBeatQuery = `SELECT ` + jobColumns + ` FROM jobs INDEXED BY jobs_running_worker` + bodyJoin + `
		WHERE state = 'running' AND held = 0 AND coalesce(heartbeat_at, started_at, updated_at) < ?
		ORDER BY coalesce(heartbeat_at, started_at, updated_at) LIMIT ?`
	// staleStartedQuery: running jobs started before ?. Both read every
	// running job (no more than the workers have slots) through the index
	// of running jobs and sort them: an index of their own would be moved
	// by every job's start and end (and, for the last sign of life, every
	// lease renewal) for queries the reaper runs once a tick.
	staleStartedQuery = `SELECT ` + jobColumns + ` FROM jobs INDEXED BY jobs_running_worker` + bodyJoin + `
		WHERE state = 'running' AND held = 0 AND started_at < ?
		ORDER BY started_at LIMIT ?`
	// staleDeadlineQuery: pending jobs whose dispatch deadline is at or
	// before ? with no claim live at ?.
	staleDeadlineQuery = `SELECT ` + jobColumns + ` FROM jobs INDEXED BY jobs_deadline_queue` + bodyJoin + `
		WHERE state = 'pending' AND held = 0 AND dispatch_deadline <= ?
			AND (claim_until IS NULL OR claim_until <= ?)
		ORDER BY dispatch_deadline LIMIT ?`
	// staleKindQuery: pending jobs of kind ? holding no claim, in ready
	// order (their index's).
	staleKindQuery = `SELECT ` + jobColumns + ` FROM jobs INDEXED BY jobs_ready_queue` + bodyJoin + `
		WHERE state = 'pending' AND claim_until IS NULL AND held = 0 AND kind = ?
		ORDER BY priority DESC, fair_at, id LIMIT ?`
	// pendingKindsQuery lists the kinds of the unclaimed pending jobs by
	// seeking from one kind to the next in their index, however many jobs
	// each kind has.
	pendingKindsQuery = `WITH RECURSIVE k(kind) AS (
			SELECT (SELECT min(kind) FROM jobs INDEXED BY jobs_ready_queue
				WHERE state = 'pending' AND claim_until IS NULL AND held = 0)
			UNION ALL
			SELECT (SELECT min(kind) FROM jobs INDEXED BY jobs_ready_queue
				WHERE state = 'pending' AND claim_until IS NULL AND held = 0 AND kind > k.kind)
			FROM k WHERE k.kind IS NOT NULL)
		SELECT kind FROM k WHERE kind IS NOT NULL`
	// purgeQuery finds final top-level jobs finished before ?, oldest
	// first, at most ?; a parent's children go with it.
	purgeQuery = `SELECT id, window_size FROM jobs INDEXED BY jobs_finished_top
		WHERE finished_at IS NOT NULL AND parent = '' AND finished_at < ?
			AND state IN ('succeeded', 'failed', 'cancelled')
		ORDER BY finished_at LIMIT ?`
	deleteJobQuery = `DELETE FROM jobs WHERE id = ? RETURNING tenant, state`
)

// Stale returns, oldest first, up to q.Limit jobs the reaper must look at,
// from one snapshot:
//
//   - running jobs whose heartbeat (or, with none, start) is older than
//     q.HeartbeatBefore;
//   - running jobs started before q.StartedBefore;
//   - pending jobs whose dispatch deadline is at or before q.DeadlineBefore
//     and whose claim, if any, ended by q.Now;
//   - pending jobs of q.Kind holding no claim.
//
// A zero time disables its part; a zero q.Now is the current time. Each
// part is an index range scan; a job is ordered by the oldest of the times
// that made it stale.
func (s *Store) Stale(ctx context.Context, q store.StaleQuery) ([]contracts.Job, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultStaleLimit
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	type part struct {
		query string
		args  []any
		key   func(contracts.Job) time.Time
	}
	var parts []part
	if !q.HeartbeatBefore.IsZero() {
		parts = append(parts, part{
			query: staleBeatQuery,
			args:  []any{q.HeartbeatBefore.UnixNano(), limit},
			key: func(j contracts.Job) time.Time {
				switch {
				case j.HeartbeatAt != nil:
					return *j.HeartbeatAt
				case j.StartedAt != nil:
					return *j.StartedAt
				}
				return j.UpdatedAt
			},
		})
	}
	if !q.StartedBefore.IsZero() {
		parts = append(parts, part{
			query: staleStartedQuery,
			args:  []any{q.StartedBefore.UnixNano(), limit},
			key:   func(j contracts.Job) time.Time { return *j.StartedAt },
		})
	}
	if !q.DeadlineBefore.IsZero() {
		parts = append(parts, part{
			query: staleDeadlineQuery,
			args:  []any{q.DeadlineBefore.UnixNano(), now.UnixNano(), limit},
			key:   func(j contracts.Job) time.Time { return j.DispatchDeadline },
		})
	}
	if q.Kind != "" {
		parts = append(parts, part{
			query: staleKindQuery,
			args:  []any{q.Kind, limit},
			key:   func(j contracts.Job) time.Time { return j.CreatedAt },
		})
	}
	if len(parts) == 0 {
		return nil, nil
	}

	var found stale.Set
	err := s.read(ctx, "find stale jobs", func(tx *sql.Tx) error {
		for _, p := range parts {
			rows, err := tx.QueryContext(ctx, p.query, p.args...)
			if err != nil {
				return err
			}
			jobs, err := scanJobs(rows)
			if err != nil {
				return err
			}
			for _, j := range jobs {
				found.Add(j, p.key(j))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return found.Jobs(limit), nil
}

// PendingKinds returns the kinds of the pending jobs holding no claim, in
// name order: one index seek per kind.
func (s *Store) PendingKinds(ctx context.Context) ([]string, error) {
	var kinds []string
	err := s.read(ctx, "list pending kinds", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, pendingKindsQuery)
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			kinds = append(kinds, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return kinds, nil
}

// Purge deletes up to limit final jobs that finished before finishedBefore,
// oldest first, and returns how many it deleted. A limit of 0 means
// DefaultPurgeLimit.
func (s *Store) Purge(ctx context.Context, finishedBefore time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = DefaultPurgeLimit
	}
	if finishedBefore.IsZero() {
		return 0, nil
	}
	var n int
	err := s.write(ctx, store.WritePurge, "purge jobs", func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, purgeQuery, finishedBefore.UnixNano(), limit)
		if err != nil {
			return err
		}
		var (
			ids     []string
			parents []string
		)
		err = scanAll(rows, func(id string, window int) {
			ids = append(ids, id)
			if window > 0 {
				parents = append(parents, id)
			}
		})
		if err != nil {
			return err
		}
		for _, p := range parents {
			k, err := s.purgeChildren(ctx, tx, p)
			if err != nil {
				return err
			}
			n += k
		}
		for _, id := range ids {
			rows, err := tx.QueryContext(ctx, deleteJobQuery, id)
			if err != nil {
				return fmt.Errorf("delete job %s: %w", id, err)
			}
			k, err := s.countDeleted(rows)
			if err != nil {
				return fmt.Errorf("delete job %s: %w", id, err)
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Reconcile recomputes the admission counters and the counts of jobs by
// state from the jobs table in one write transaction and returns the total
// absolute drift it corrected: 0 unless the counters were changed behind
// the driver's back. First it takes back the staged admissions a process
// abandoned (see stage.go).
func (s *Store) Reconcile(ctx context.Context) (int, error) {
	if _, err := s.dropAbandoned(ctx, time.Now().Add(-s.abandonAfter)); err != nil {
		return 0, err
	}
	drift := 0
	err := s.write(ctx, store.WriteReconcile, "reconcile counters", func(tx *sql.Tx) error {
		drift = 0
		// Reconcile rewrites the rows: the transaction's changes go first,
		// and what it read is stale afterwards.
		if err := s.flushCounters(ctx, tx); err != nil {
			return err
		}
		defer s.resetCounters()
		stored := map[string]int{}
		rows, err := tx.QueryContext(ctx, `SELECT scope, active FROM counters`)
		if err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { stored[k] = n }); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		actual := map[string]int{store.GlobalScope: 0}
		rows, err = tx.QueryContext(ctx, activeByTenantQuery)
		if err != nil {
			return fmt.Errorf("count active jobs: %w", err)
		}
		err = scanAll(rows, func(tenant string, n int) {
			actual[store.TenantScope(tenant)] = n
			actual[store.GlobalScope] += n
		})
		if err != nil {
			return fmt.Errorf("count active jobs: %w", err)
		}
		rows, err = tx.QueryContext(ctx, itemsByTenantQuery)
		if err != nil {
			return fmt.Errorf("count items in flight: %w", err)
		}
		if err := scanAll(rows, func(tenant string, n int) { actual[store.ItemsScope(tenant)] = n }); err != nil {
			return fmt.Errorf("count items in flight: %w", err)
		}

		for scope, n := range stored {
			drift += absInt(n - actual[scope])
		}
		for scope, n := range actual {
			if _, ok := stored[scope]; !ok {
				drift += n
			}
		}
		if drift == 0 {
			// Only drop the rows of tenants with nothing active.
			_, err := tx.ExecContext(ctx, `DELETE FROM counters WHERE active = 0 AND scope != ?`, store.GlobalScope)
			return err
		}
		// Rewrite the counts in place: the rows also hold the fair-queue
		// clocks, which the jobs cannot tell.
		if _, err := tx.ExecContext(ctx, `UPDATE counters SET active = 0`); err != nil {
			return fmt.Errorf("reset counters: %w", err)
		}
		for scope, n := range actual {
			if _, err := tx.ExecContext(ctx, `INSERT INTO counters (scope, active) VALUES (?, ?)
				ON CONFLICT (scope) DO UPDATE SET active = excluded.active`, scope, n); err != nil {
				return fmt.Errorf("write counters: %w", err)
			}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM counters WHERE active = 0 AND scope != ?`, store.GlobalScope)
		return err
	})
	if err != nil {
		return 0, err
	}
	states, err := s.reconcileStateCounts(ctx, time.Now())
	if err != nil {
		return drift, err
	}
	return drift + states, nil
}

// scanAll reads every (name, count) row into put and closes rows.
func scanAll(rows *sql.Rows, put func(string, int)) error {
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			k string
			n int
		)
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		put(k, n)
	}
	return rows.Err()
}

func absInt(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
