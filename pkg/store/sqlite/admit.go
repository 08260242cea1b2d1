package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Admit inserts job if the caps allow it, in one write transaction:
//
//  1. when job.Key is set and the tenant has an active job with that key,
//     that job is returned with store.Joined;
//  2. when the global, then the tenant's, active count has reached its cap
//     the job is rejected (store.RejectedGlobal, store.RejectedTenant);
//  3. otherwise the job is inserted and both counters go up by one.
//
// Joined and rejected admissions write nothing. The job must be pending at
// attempt 0 and have an id; a zero CreatedAt is taken as now and a zero
// UpdatedAt as CreatedAt. The returned job is the one stored, times in UTC.
func (s *Store) Admit(ctx context.Context, job contracts.Job, caps store.Caps) (contracts.Job, store.Admission, error) {
	if err := checkNewJob(job); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("sqlite: admit job %s: %w", job.ID, err)
	}
	if job.CreatedAt.IsZero() {
		job.CreatedAt = time.Now()
	}
	if job.UpdatedAt.IsZero() {
		job.UpdatedAt = job.CreatedAt
	}
	progress, err := progressArg(job.Progress)
	if err != nil {
		return contracts.Job{}, 0, fmt.Errorf("sqlite: admit job %s: %w", job.ID, err)
	}

	var (
		out contracts.Job
		adm store.Admission
	)
	err = s.write(ctx, "admit job "+job.ID, func(tx *sql.Tx) error {
		out, adm = contracts.Job{}, 0
		if job.Key != "" {
			j, err := activeByKey(ctx, tx, job.Tenant, job.Key)
			switch {
			case err == nil:
				out, adm = j, store.Joined
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("look up key: %w", err)
			}
		}
		global, tenant, err := readCounters(ctx, tx, job.Tenant)
		if err != nil {
			return err
		}
		if caps.Global > 0 && global >= caps.Global {
			adm = store.RejectedGlobal
			return nil
		}
		if caps.Tenant > 0 && tenant >= caps.Tenant {
			adm = store.RejectedTenant
			return nil
		}
		row := tx.QueryRowContext(ctx, `INSERT INTO jobs (`+jobColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			RETURNING `+jobColumns,
			job.ID, job.Tenant, job.Kind, jsonArg(job.Payload), job.Key, job.Priority,
			string(job.State), job.Attempt, job.Runs, job.MaxAttempts, job.Worker, job.Error,
			jsonArg(job.Result), progress, boolArg(job.CancelRequested),
			job.CreatedAt.UnixNano(), job.UpdatedAt.UnixNano(), ptrNanos(job.StartedAt),
			ptrNanos(job.FinishedAt), ptrNanos(job.NextDispatchAt), nanos(job.DispatchDeadline),
			ptrNanos(job.ClaimUntil), ptrNanos(job.HeartbeatAt))
		j, err := scanJob(row)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if err := addActive(ctx, tx, job.Tenant, +1); err != nil {
			return err
		}
		out, adm = j, store.Admitted
		return nil
	})
	if err != nil {
		return contracts.Job{}, 0, err
	}
	return out, adm, nil
}

// checkNewJob refuses a job Admit cannot insert as it is.
func checkNewJob(job contracts.Job) error {
	switch {
	case job.ID == "":
		return errors.New("job has no id")
	case job.State != contracts.StatePending:
		return fmt.Errorf("new job is %q, want %q: %w", job.State, contracts.StatePending, store.ErrBadTransition)
	case job.Attempt != 0:
		return fmt.Errorf("new job is at attempt %d, want 0: %w", job.Attempt, store.ErrBadTransition)
	}
	return nil
}

// activeByKey finds the tenant's active job with that dedup key, or
// sql.ErrNoRows.
func activeByKey(ctx context.Context, tx *sql.Tx, tenant, key string) (contracts.Job, error) {
	row := tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE tenant = ? AND key = ? AND key != '' AND state IN `+activeStates+` LIMIT 1`,
		tenant, key)
	return scanJob(row)
}

// readCounters returns the global and the tenant's active counts.
func readCounters(ctx context.Context, tx *sql.Tx, tenant string) (global, tenantActive int, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT scope, active FROM counters WHERE scope IN (?, ?)`,
		globalScope, tenantScope(tenant))
	if err != nil {
		return 0, 0, fmt.Errorf("read counters: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			scope string
			n     int
		)
		if err := rows.Scan(&scope, &n); err != nil {
			return 0, 0, fmt.Errorf("read counters: %w", err)
		}
		if scope == globalScope {
			global = n
		} else {
			tenantActive = n
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("read counters: %w", err)
	}
	return global, tenantActive, nil
}

// addActive moves the global and the tenant's active counts by delta.
func addActive(ctx context.Context, tx *sql.Tx, tenant string, delta int) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO counters (scope, active) VALUES (?, ?), (?, ?)
		ON CONFLICT (scope) DO UPDATE SET active = active + excluded.active`,
		globalScope, delta, tenantScope(tenant), delta)
	if err != nil {
		return fmt.Errorf("update counters: %w", err)
	}
	return nil
}
