package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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
	var res []store.AdmitResult
	err = s.write(ctx, "admit job "+job.ID, func(tx *sql.Tx) error {
		var err error
		res, err = s.admitAll(ctx, tx, []admitInput{in})
		return err
	})
	if err != nil {
		return contracts.Job{}, 0, err
	}
	return res[0].Job, res[0].Admission, nil
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
	var out []store.AdmitResult
	err := s.write(ctx, fmt.Sprintf("admit a batch of %d jobs", len(reqs)), func(tx *sql.Tx) error {
		var err error
		out, err = s.admitAll(ctx, tx, ins)
		return err
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

// scopeCount is a counter row as an admission sees it: what it read, and
// what the admissions of this transaction add.
type scopeCount struct {
	active, added int
	fairAt        float64
}

// admitAll admits ins in order inside one write transaction (see Admit):
// dedup keys are looked up per job (and among the batch's own jobs), the
// counter rows are read once per scope and written once at the end, and
// the new rows go in with multi-row inserts. The jobs returned are as a
// read would return them.
func (s *Store) admitAll(ctx context.Context, tx *sql.Tx, ins []admitInput) ([]store.AdmitResult, error) {
	out := make([]store.AdmitResult, len(ins))
	var (
		global  *scopeCount
		tenants = map[string]*scopeCount{}
		order   []string // tenants in first-admitted order
		keys    = map[[2]string]int{}
		rows    = make([]admitInput, 0, len(ins))
	)
	for i, in := range ins {
		job, caps := in.job, in.caps
		if job.Key != "" {
			if k, ok := keys[[2]string{job.Tenant, job.Key}]; ok {
				out[i] = store.AdmitResult{Job: out[k].Job, Admission: store.Joined}
				continue
			}
			j, err := s.activeByKey(ctx, tx, job.Tenant, job.Key)
			switch {
			case err == nil:
				out[i] = store.AdmitResult{Job: j, Admission: store.Joined}
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return nil, fmt.Errorf("look up key: %w", err)
			}
		}
		t, ok := tenants[job.Tenant]
		if !ok {
			c, err := s.readCounters(ctx, tx, job.Tenant)
			if err != nil {
				return nil, err
			}
			if global == nil {
				global = &scopeCount{active: c.global, fairAt: c.virtual}
			}
			t = &scopeCount{active: c.tenant, fairAt: c.tenantFair}
			tenants[job.Tenant] = t
		}
		if caps.Global > 0 && global.active+global.added >= caps.Global {
			out[i] = store.AdmitResult{Admission: store.RejectedGlobal}
			continue
		}
		if caps.Tenant > 0 && t.active+t.added >= caps.Tenant {
			out[i] = store.AdmitResult{Admission: store.RejectedTenant}
			continue
		}
		job.FairAt = store.FairAt(global.fairAt, t.fairAt, caps.Weight)
		t.fairAt = job.FairAt
		if t.added == 0 {
			order = append(order, job.Tenant)
		}
		t.added++
		global.added++
		in.job = job
		rows = append(rows, in)
		out[i] = store.AdmitResult{Job: asStored(job), Admission: store.Admitted}
		if job.Key != "" {
			keys[[2]string{job.Tenant, job.Key}] = i
		}
	}
	if err := s.insertJobs(ctx, tx, rows); err != nil {
		return nil, err
	}
	for _, tenant := range order {
		t := tenants[tenant]
		if err := s.addActive(ctx, tx, tenant, t.added); err != nil {
			return nil, err
		}
		if _, err := tx.StmtContext(ctx, s.ws.setTenantFair).ExecContext(ctx, t.fairAt, store.TenantScope(tenant)); err != nil {
			return nil, fmt.Errorf("update the tenant's fair queue: %w", err)
		}
	}
	return out, nil
}

// insertRows is how many rows one multi-row insert carries.
const insertRows = 16

// insertJobs inserts rows, insertRows to a statement and the rest one by
// one (all with prepared statements).
func (s *Store) insertJobs(ctx context.Context, tx *sql.Tx, rows []admitInput) error {
	args := make([]any, 0, insertRows*jobColumnCount)
	for len(rows) >= insertRows {
		args = args[:0]
		for _, in := range rows[:insertRows] {
			args = appendJobArgs(args, in)
		}
		if _, err := tx.StmtContext(ctx, s.ws.insertJobs).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		rows = rows[insertRows:]
	}
	for _, in := range rows {
		if _, err := tx.StmtContext(ctx, s.ws.insertJob).ExecContext(ctx, appendJobArgs(args[:0], in)...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	return nil
}

// appendJobArgs appends a new job's columns, in jobColumns order.
func appendJobArgs(args []any, in admitInput) []any {
	job := in.job
	return append(args,
		job.ID, job.Tenant, job.Kind, jsonArg(job.Payload), job.Key, job.Priority,
		string(job.State), job.Attempt, job.Runs, job.MaxAttempts, job.Worker, job.Error,
		jsonArg(job.Result), in.progress, boolArg(job.CancelRequested),
		job.CreatedAt.UnixNano(), job.UpdatedAt.UnixNano(), ptrNanos(job.StartedAt),
		ptrNanos(job.FinishedAt), ptrNanos(job.NextDispatchAt), nanos(job.DispatchDeadline),
		ptrNanos(job.ClaimUntil), ptrNanos(job.HeartbeatAt), ptrNanos(job.RunAt),
		job.ConcurrencyKey, job.ConcurrencyLimit, in.runErrors, job.FairAt)
}

// asStored is a new job as reading its row back would return it: times in
// UTC without a monotonic reading, empty JSON documents as nil.
func asStored(j contracts.Job) contracts.Job {
	utc := func(t *time.Time) *time.Time {
		if t == nil || t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	j.StartedAt, j.FinishedAt, j.NextDispatchAt = utc(j.StartedAt), utc(j.FinishedAt), utc(j.NextDispatchAt)
	j.ClaimUntil, j.HeartbeatAt, j.RunAt = utc(j.ClaimUntil), utc(j.HeartbeatAt), utc(j.RunAt)
	if !j.DispatchDeadline.IsZero() {
		j.DispatchDeadline = j.DispatchDeadline.UTC()
	}
	if len(j.Payload) == 0 {
		j.Payload = nil
	}
	if len(j.Result) == 0 {
		j.Result = nil
	}
	if len(j.Errors) == 0 {
		j.Errors = nil
	}
	for i := range j.Errors {
		j.Errors[i].At = j.Errors[i].At.UTC()
	}
	return j
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
	insertJobQuery = `INSERT INTO jobs (` + jobColumns + `) VALUES ` + jobPlaceholders
	// jobPlaceholders are one row's placeholders.
	jobPlaceholders = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	addActiveQuery  = `INSERT INTO counters (scope, active) VALUES (?, ?), (?, ?)
		ON CONFLICT (scope) DO UPDATE SET active = active + excluded.active`
)

// insertJobsQuery inserts insertRows jobs.
var insertJobsQuery = `INSERT INTO jobs (` + jobColumns + `) VALUES ` + jobPlaceholders +
	strings.Repeat(`, `+jobPlaceholders, insertRows-1)

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

// readCounters returns the global and the tenant's counters, with the
// slots tx released so far written first.
func (s *Store) readCounters(ctx context.Context, tx *sql.Tx, tenant string) (counters, error) {
	if err := s.flushReleased(ctx, tx); err != nil {
		return counters{}, err
	}
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

// release frees one admission slot of tenant in the open write
// transaction. The counters are written once per tenant when the
// transaction commits (flushReleased), not once per finished job; every
// read of the counters inside the transaction flushes first.
func (s *Store) release(tenant string) {
	if s.released == nil {
		s.released = map[string]int{}
	}
	s.released[tenant]++
}

// flushReleased writes the slots released so far in tx to the counters.
func (s *Store) flushReleased(ctx context.Context, tx *sql.Tx) error {
	for tenant, n := range s.released {
		if err := s.addActive(ctx, tx, tenant, -n); err != nil {
			return err
		}
		delete(s.released, tenant)
	}
	return nil
}

// addActive moves the global and the tenant's active counts by delta.
func (s *Store) addActive(ctx context.Context, tx *sql.Tx, tenant string, delta int) error {
	_, err := tx.StmtContext(ctx, s.ws.addActive).ExecContext(ctx, store.GlobalScope, delta, store.TenantScope(tenant), delta)
	if err != nil {
		return fmt.Errorf("update counters: %w", err)
	}
	return nil
}
