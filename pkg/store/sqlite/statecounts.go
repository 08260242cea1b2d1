package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Counts of jobs by state (see store.StateDeltas). The table job_counts
// holds one row per tenant and state. Every write that creates, moves or
// deletes jobs records store.StateDeltas in the open transaction
// (countMove); the write loop adds them to job_counts once per group
// commit, with the admission counters (flushCounters), so a group of
// writes costs one small upsert per tenant and state it touched. (Triggers
// on jobs did the same per row, but a statement on a table with triggers
// keeps a statement journal: every page it changes is copied first, which
// tripled the store's share of a job's life in BenchmarkLifecycle.)
var stateCountSchema = []string{
	`CREATE TABLE IF NOT EXISTS job_counts (
		tenant TEXT    NOT NULL,
		state  TEXT    NOT NULL,
		n      INTEGER NOT NULL,
		PRIMARY KEY (tenant, state)
	) STRICT, WITHOUT ROWID`,
	`DROP TRIGGER IF EXISTS job_counts_insert`,
	`DROP TRIGGER IF EXISTS job_counts_move`,
	`DROP TRIGGER IF EXISTS job_counts_delete`,
}

// addStateCountsQuery adds a delta to one counter of jobs by state.
const addStateCountsQuery = `INSERT INTO job_counts (tenant, state, n) VALUES (?, ?, ?)
	ON CONFLICT (tenant, state) DO UPDATE SET n = n + excluded.n`

// countMove records what moving n jobs of tenant from one state to another
// does to the counts of jobs by state ("" from: inserted, "" to: deleted)
// in the open write transaction; flushCounters writes it.
func (s *Store) countMove(tenant string, from, to contracts.JobState, n int) {
	if s.states == nil {
		s.states = store.StateCounts{}
	}
	s.states.Apply(store.StateDeltas(tenant, from, to, n)...)
}

// flushStateCounts adds the open transaction's deltas to the counters.
func (s *Store) flushStateCounts(ctx context.Context, tx *sql.Tx) error {
	for tenant, byState := range s.states {
		for st, n := range byState {
			if _, err := tx.ExecContext(ctx, addStateCountsQuery, tenant, string(st), n); err != nil {
				return fmt.Errorf("write counts of jobs by state: %w", err)
			}
		}
	}
	clear(s.states)
	return nil
}

const (
	// countJobsQuery counts every job by tenant and state: a full scan,
	// for building and reconciling the counters only.
	countJobsQuery = `SELECT tenant, state, count(*) FROM jobs GROUP BY tenant, state`
	// storedCountsQuery reads every counter.
	storedCountsQuery = `SELECT tenant, state, n FROM job_counts WHERE n != 0`
	// tenantCountsQuery reads one tenant's counters.
	tenantCountsQuery = `SELECT state, n FROM job_counts WHERE tenant = ?`
	// tenantActiveQuery reads the admission slots of each tenant from its
	// admission counter (store.TenantScope).
	tenantActiveQuery = `SELECT substr(scope, 8), active FROM counters
		WHERE scope >= 'tenant:' AND scope < 'tenant;' AND active != 0`
)

// hasStateCounts reports whether the database already has its counters of
// jobs by state (a store created by an earlier release has not).
func hasStateCounts(ctx context.Context, tx *sql.Tx) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'job_counts'`).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up table job_counts: %w", err)
	}
	return n > 0, nil
}

// scanStateCounts reads (tenant, state, n) rows.
func scanStateCounts(rows *sql.Rows) (store.StateCounts, error) {
	defer func() { _ = rows.Close() }()
	out := store.StateCounts{}
	for rows.Next() {
		var (
			tenant, state string
			n             int
		)
		if err := rows.Scan(&tenant, &state, &n); err != nil {
			return nil, err
		}
		out.Apply(store.StateDelta{Tenant: tenant, State: contracts.JobState(state), N: n})
	}
	return out, rows.Err()
}

// countJobs counts every job of tx by tenant and state.
func countJobs(ctx context.Context, tx *sql.Tx) (store.StateCounts, error) {
	rows, err := tx.QueryContext(ctx, countJobsQuery)
	if err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	c, err := scanStateCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	return c, nil
}

// writeStateCounts replaces every counter with c.
func writeStateCounts(ctx context.Context, tx *sql.Tx, c store.StateCounts) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_counts`); err != nil {
		return fmt.Errorf("clear counts of jobs by state: %w", err)
	}
	for tenant, byState := range c {
		for st, n := range byState {
			if _, err := tx.ExecContext(ctx, `INSERT INTO job_counts (tenant, state, n) VALUES (?, ?, ?)`,
				tenant, string(st), n); err != nil {
				return fmt.Errorf("write counts of jobs by state: %w", err)
			}
		}
	}
	return nil
}

// buildStateCounts counts the jobs once into the counters (a store opened
// for the first time by this release).
func buildStateCounts(ctx context.Context, tx *sql.Tx) error {
	c, err := countJobs(ctx, tx)
	if err != nil {
		return err
	}
	return writeStateCounts(ctx, tx, c)
}

// stateCheckEvery is how often Reconcile compares the counts of jobs by
// state with a full count of the jobs (store.StateCheckEvery).
const stateCheckEvery = store.StateCheckEvery

// stateDrift compares the stored counters with a full count of the jobs,
// in one snapshot of tx, and returns the count and the drift.
func stateDrift(ctx context.Context, tx *sql.Tx) (store.StateCounts, int, error) {
	rows, err := tx.QueryContext(ctx, storedCountsQuery)
	if err != nil {
		return nil, 0, fmt.Errorf("read counts of jobs by state: %w", err)
	}
	stored, err := scanStateCounts(rows)
	if err != nil {
		return nil, 0, fmt.Errorf("read counts of jobs by state: %w", err)
	}
	actual, err := countJobs(ctx, tx)
	if err != nil {
		return nil, 0, err
	}
	return actual, store.StateCountDrift(stored, actual), nil
}

// reconcileStateCounts repairs the counts of jobs by state when they are
// due for a check (see stateCheckEvery) and returns how far they were
// (store.StateCountDrift). The full count runs on a read connection and
// the writer is taken only to repair a drift found, counting again there.
func (s *Store) reconcileStateCounts(ctx context.Context, now time.Time) (int, error) {
	last := s.stateChecked.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < stateCheckEvery {
		return 0, nil
	}
	drift := 0
	err := s.read(ctx, "check counts of jobs by state", func(tx *sql.Tx) error {
		var err error
		_, drift, err = stateDrift(ctx, tx)
		return err
	})
	if err != nil || drift == 0 {
		if err == nil {
			s.stateChecked.Store(now.UnixNano())
		}
		return 0, err
	}
	err = s.write(ctx, store.WriteReconcile, "repair counts of jobs by state", func(tx *sql.Tx) error {
		// The writes before this one in the group commit go first.
		if err := s.flushCounters(ctx, tx); err != nil {
			return err
		}
		actual, d, err := stateDrift(ctx, tx)
		if err != nil {
			return err
		}
		drift = d
		return writeStateCounts(ctx, tx, actual)
	})
	if err != nil {
		return 0, err
	}
	s.stateChecked.Store(now.UnixNano())
	return drift, nil
}

// Stats reads the counters of jobs by state (every state present, zeros
// included) and the admission slots of each tenant with some, from one
// snapshot: a few rows per tenant, whatever the number of jobs.
func (s *Store) Stats(ctx context.Context) (store.Counts, error) {
	c := store.Counts{ByState: store.ZeroStates(), TenantActive: map[string]int{}}
	err := s.read(ctx, "stats", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, storedCountsQuery)
		if err != nil {
			return fmt.Errorf("read counts of jobs by state: %w", err)
		}
		counts, err := scanStateCounts(rows)
		if err != nil {
			return fmt.Errorf("read counts of jobs by state: %w", err)
		}
		c.ByState = counts.ByState()
		rows, err = tx.QueryContext(ctx, tenantActiveQuery)
		if err != nil {
			return fmt.Errorf("read tenants' slots: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { c.TenantActive[k] = n }); err != nil {
			return fmt.Errorf("read tenants' slots: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Counts{}, err
	}
	return c, nil
}

// TenantCounts reads tenant's counters of jobs by state (every state
// present, zeros included), children of its fan-outs included.
func (s *Store) TenantCounts(ctx context.Context, tenant string) (map[contracts.JobState]int, error) {
	out := store.ZeroStates()
	err := s.read(ctx, "count the jobs of tenant "+tenant, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, tenantCountsQuery, tenant)
		if err != nil {
			return fmt.Errorf("read counts of jobs by state: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { out[contracts.JobState(k)] = n }); err != nil {
			return fmt.Errorf("read counts of jobs by state: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
