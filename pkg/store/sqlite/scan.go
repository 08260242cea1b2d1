package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// jobColumns lists the jobs table in the order scanJob reads it.
const jobColumns = `id, tenant, kind, payload, key, priority, state, attempt, runs,
	max_attempts, worker, error, result, progress, cancel_requested,
	created_at, updated_at, started_at, finished_at, next_dispatch_at,
	dispatch_deadline, claim_until, heartbeat_at, run_at, concurrency_key,
	concurrency_limit, errors, fair_at, parent, item_index, window_size,
	fail_fast, children_total, children_succeeded, children_failed,
	children_cancelled, stall_timeout, max_runtime, inputs`

// jobColumnCount is the number of jobColumns.
const jobColumnCount = 39

// activeStates is the SQL list of the states counted against the caps.
const activeStates = `('pending', 'running')`

// activeByTenantQuery counts active jobs per tenant: a scan of the small
// partial index of unfinished jobs, already in tenant order.
const activeByTenantQuery = `SELECT tenant, sum(slots) FROM jobs INDEXED BY jobs_unfinished_slots
	WHERE finished_at IS NULL AND slots > 0 GROUP BY tenant`

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row of jobColumns. It returns sql.ErrNoRows unwrapped so
// callers can test for it.
func scanJob(sc rowScanner) (contracts.Job, error) {
	var (
		j                                 contracts.Job
		state                             string
		payload, result, progress         sql.NullString
		cancel                            int64
		created, updated                  int64
		started, finished, next, deadline sql.NullInt64
		claim, beat, runAt                sql.NullInt64
		runErrors, inputs                 sql.NullString
		index, window                     int
		failFast                          int64
		children                          contracts.ChildCounts
	)
	err := sc.Scan(&j.ID, &j.Tenant, &j.Kind, &payload, &j.Key, &j.Priority, &state,
		&j.Attempt, &j.Runs, &j.MaxAttempts, &j.Worker, &j.Error, &result, &progress,
		&cancel, &created, &updated, &started, &finished, &next, &deadline, &claim, &beat,
		&runAt, &j.ConcurrencyKey, &j.ConcurrencyLimit, &runErrors, &j.FairAt,
		&j.Parent, &index, &window, &failFast, &children.Total, &children.Succeeded,
		&children.Failed, &children.Cancelled, &j.StallTimeout, &j.MaxRuntime, &inputs)
	if err != nil {
		return contracts.Job{}, err
	}
	j.State = contracts.JobState(state)
	j.Payload = rawJSON(payload)
	j.Result = rawJSON(result)
	if progress.Valid && progress.String != "" {
		var p contracts.Progress
		if err := json.Unmarshal([]byte(progress.String), &p); err != nil {
			return contracts.Job{}, fmt.Errorf("decode progress of job %s: %w", j.ID, err)
		}
		j.Progress = &p
	}
	j.CancelRequested = cancel != 0
	if inputs.Valid && inputs.String != "" {
		if err := json.Unmarshal([]byte(inputs.String), &j.Inputs); err != nil {
			return contracts.Job{}, fmt.Errorf("decode inputs of job %s: %w", j.ID, err)
		}
	}
	if j.Parent != "" {
		j.Index = &index
	}
	if window > 0 {
		// A parent: pending counts the running children too until
		// withRunning counts them.
		j.Concurrency, j.FailFast = window, failFast != 0
		children.Pending = children.Total - children.Finished()
		j.Children = &children
		j.Progress = children.Progress()
	}
	j.CreatedAt = fromNanos(created)
	j.UpdatedAt = fromNanos(updated)
	j.StartedAt = fromNullNanos(started)
	j.FinishedAt = fromNullNanos(finished)
	j.NextDispatchAt = fromNullNanos(next)
	if deadline.Valid {
		j.DispatchDeadline = fromNanos(deadline.Int64)
	}
	j.ClaimUntil = fromNullNanos(claim)
	j.HeartbeatAt = fromNullNanos(beat)
	j.RunAt = fromNullNanos(runAt)
	if runErrors.Valid && runErrors.String != "" {
		if err := json.Unmarshal([]byte(runErrors.String), &j.Errors); err != nil {
			return contracts.Job{}, fmt.Errorf("decode errors of job %s: %w", j.ID, err)
		}
	}
	return j, nil
}

// rowidFirst scans a row of rowid followed by jobColumns with scanJob. A
// write that read a row changes it by its rowid: the write lock keeps the
// row where it was read, and the update needs no second lookup by id.
type rowidFirst struct {
	sc    rowScanner
	rowid *int64
}

// Scan reads the rowid, then dest.
func (r rowidFirst) Scan(dest ...any) error {
	return r.sc.Scan(append([]any{r.rowid}, dest...)...)
}

// scanJobs reads every row of rows and closes it.
func scanJobs(rows *sql.Rows) ([]contracts.Job, error) {
	defer func() { _ = rows.Close() }()
	var jobs []contracts.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.RawMessage(s.String)
}

// jsonArg binds a JSON document as TEXT, or NULL when it is empty.
func jsonArg(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

// progressArg binds a progress report as JSON TEXT, or NULL.
func progressArg(p *contracts.Progress) (any, error) {
	if p == nil {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode progress: %w", err)
	}
	return string(b), nil
}

// nanos is the column value of a time: UTC unix nanoseconds, or NULL for
// the zero time.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// ptrNanos is nanos for an optional time: nil (or zero) is NULL.
func ptrNanos(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nanos(*t)
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

func boolArg(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runErrorsArg binds a job's run errors as JSON TEXT, or NULL when none.
func runErrorsArg(errs []contracts.RunError) (any, error) {
	if len(errs) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(errs)
	if err != nil {
		return nil, fmt.Errorf("encode run errors: %w", err)
	}
	return string(b), nil
}
