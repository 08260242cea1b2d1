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
	in, err := newAdmitInput(job, caps)
	if err != nil {
		return contracts.Job{}, 0, fmt.Errorf("sqlite: admit job %s: %w", job.ID, err)
	}
	var res store.AdmitResult
	err = s.write(ctx, "admit job "+job.ID, func(tx *sql.Tx) error {
		var err error
		res, err = s.admitIn(ctx, tx, in)
		return err
	})
	if err != nil {
		return contracts.Job{}, 0, err
	}
	return res.Job, res.Admission, nil
}

// AdmitBatch admits every request as Admit would, one after the other, in
// one write transaction: a job sees the jobs admitted before it in the
// batch (their slots, their dedup keys). Rejected and joined jobs write
// nothing; an error admits nothing.
func (s *Store) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) ([]store.AdmitResult, error) {
	ins := make([]admitInput, len(reqs))
	for i, r := range reqs {
		in, err := newAdmitInput(r.Job, r.Caps)
		if err != nil {
			return nil, fmt.Errorf("sqlite: admit batch: job %s: %w", r.Job.ID, err)
		}
		ins[i] = in
	}
	out := make([]store.AdmitResult, len(reqs))
	err := s.write(ctx, fmt.Sprintf("admit a batch of %d jobs", len(reqs)), func(tx *sql.Tx) error {
		for i, in := range ins {
			res, err := s.admitIn(ctx, tx, in)
			if err != nil {
				return fmt.Errorf("job %s: %w", in.job.ID, err)
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// admitInput is a checked job with its encoded columns.
type admitInput struct {
	job                 contracts.Job
	caps                store.Caps
	progress, runErrors any
}

// newAdmitInput checks a new job, fills its times and encodes its columns.
func newAdmitInput(job contracts.Job, caps store.Caps) (admitInput, error) {
	if err := store.CheckNewJob(job); err != nil {
		return admitInput{}, err
	}
	if job.CreatedAt.IsZero() {
		job.CreatedAt = time.Now()
	}
	if job.UpdatedAt.IsZero() {
		job.UpdatedAt = job.CreatedAt
	}
	progress, err := progressArg(job.Progress)
	if err != nil {
		return admitInput{}, err
	}
	runErrors, err := runErrorsArg(job.Errors)
	if err != nil {
		return admitInput{}, err
	}
	return admitInput{job: job, caps: caps, progress: progress, runErrors: runErrors}, nil
}

// admitIn is one admission inside a write transaction (see Admit).
func (s *Store) admitIn(ctx context.Context, tx *sql.Tx, in admitInput) (store.AdmitResult, error) {
	job, caps := in.job, in.caps
	if job.Key != "" {
		j, err := s.activeByKey(ctx, tx, job.Tenant, job.Key)
		switch {
		case err == nil:
			return store.AdmitResult{Job: j, Admission: store.Joined}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return store.AdmitResult{}, fmt.Errorf("look up key: %w", err)
		}
	}
	c, err := s.readCounters(ctx, tx, job.Tenant)
	if err != nil {
		return store.AdmitResult{}, err
	}
	if caps.Global > 0 && c.global >= caps.Global {
		return store.AdmitResult{Admission: store.RejectedGlobal}, nil
	}
	if caps.Tenant > 0 && c.tenant >= caps.Tenant {
		return store.AdmitResult{Admission: store.RejectedTenant}, nil
	}
	fairAt := store.FairAt(c.virtual, c.tenantFair, caps.Weight)
	_, err = tx.StmtContext(ctx, s.ws.insertJob).ExecContext(ctx,
		job.ID, job.Tenant, job.Kind, jsonArg(job.Payload), job.Key, job.Priority,
		string(job.State), job.Attempt, job.Runs, job.MaxAttempts, job.Worker, job.Error,
		jsonArg(job.Result), in.progress, boolArg(job.CancelRequested),
		job.CreatedAt.UnixNano(), job.UpdatedAt.UnixNano(), ptrNanos(job.StartedAt),
		ptrNanos(job.FinishedAt), ptrNanos(job.NextDispatchAt), nanos(job.DispatchDeadline),
		ptrNanos(job.ClaimUntil), ptrNanos(job.HeartbeatAt), ptrNanos(job.RunAt),
		job.ConcurrencyKey, job.ConcurrencyLimit, in.runErrors, fairAt)
	if err != nil {
		return store.AdmitResult{}, fmt.Errorf("insert: %w", err)
	}
	j, err := s.jobIn(ctx, tx, job.ID)
	if err != nil {
		return store.AdmitResult{}, fmt.Errorf("read back: %w", err)
	}
	if err := s.addActive(ctx, tx, job.Tenant, +1); err != nil {
		return store.AdmitResult{}, err
	}
	if _, err := tx.StmtContext(ctx, s.ws.setTenantFair).ExecContext(ctx, fairAt, store.TenantScope(job.Tenant)); err != nil {
		return store.AdmitResult{}, fmt.Errorf("update the tenant's fair queue: %w", err)
	}
	return store.AdmitResult{Job: j, Admission: store.Admitted}, nil
}

// The statements of an admission.
const (
	activeByKeyQuery = `SELECT ` + jobColumns + ` FROM jobs
		WHERE tenant = ? AND key = ? AND key != '' AND state IN ` + activeStates + ` LIMIT 1`
	// Point lookups: "scope IN (?, ?)" would build a temporary table.
	readCountersQuery = `SELECT
		coalesce((SELECT active FROM counters WHERE scope = ?1), 0),
		coalesce((SELECT fair_at FROM counters WHERE scope = ?1), 0),
		coalesce((SELECT active FROM counters WHERE scope = ?2), 0),
		coalesce((SELECT fair_at FROM counters WHERE scope = ?2), 0)`
	setTenantFairQuery = `UPDATE counters SET fair_at = ? WHERE scope = ?`
	// A failed statement aborts only itself; the group commit then rolls
	// the request back to its savepoint.
	insertJobQuery = `INSERT INTO jobs (` + jobColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	addActiveQuery = `INSERT INTO counters (scope, active) VALUES (?, ?), (?, ?)
		ON CONFLICT (scope) DO UPDATE SET active = active + excluded.active`
)

// activeByKey finds the tenant's active job with that dedup key, or
// sql.ErrNoRows.
func (s *Store) activeByKey(ctx context.Context, tx *sql.Tx, tenant, key string) (contracts.Job, error) {
	return scanJob(tx.StmtContext(ctx, s.ws.activeByKey).QueryRowContext(ctx, tenant, key))
}

// counters are the counter rows an admission reads.
type counters struct {
	global, tenant      int     // active jobs
	virtual, tenantFair float64 // the system's virtual time, the tenant's last fair_at
}

// readCounters returns the global and the tenant's counters.
func (s *Store) readCounters(ctx context.Context, tx *sql.Tx, tenant string) (counters, error) {
	var c counters
	err := tx.StmtContext(ctx, s.ws.readCounters).QueryRowContext(ctx, store.GlobalScope, store.TenantScope(tenant)).
		Scan(&c.global, &c.virtual, &c.tenant, &c.tenantFair)
	if err != nil {
		return c, fmt.Errorf("read counters: %w", err)
	}
	return c, nil
}

// jobIn reads one job inside a write transaction, or sql.ErrNoRows.
func (s *Store) jobIn(ctx context.Context, tx *sql.Tx, id string) (contracts.Job, error) {
	return scanJob(tx.StmtContext(ctx, s.ws.getJob).QueryRowContext(ctx, id))
}

// addActive moves the global and the tenant's active counts by delta.
func (s *Store) addActive(ctx context.Context, tx *sql.Tx, tenant string, delta int) error {
	_, err := tx.StmtContext(ctx, s.ws.addActive).ExecContext(ctx, store.GlobalScope, delta, store.TenantScope(tenant), delta)
	if err != nil {
		return fmt.Errorf("update counters: %w", err)
	}
	return nil
}
