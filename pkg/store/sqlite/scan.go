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
	children_cancelled, stall_timeout, max_runtime, inputs, cpu, memory, usage`

// jobColumnCount is the number of jobColumns.
const jobColumnCount = 42

// activeStates is the SQL list of the states counted against the caps.
const activeStates = `('pending', 'running')`

// activeByTenantQuery counts active jobs per tenant: a scan of the small
// partial index of unfinished jobs, already in tenant order.
const activeByTenantQuery = `SELECT tenant, sum(slots) FROM jobs INDEXED BY jobs_unfinished_slots
	WHERE finished_at IS NULL AND slots > 0 GROUP BY tenant`

// itemsByTenantQuery sums the items each tenant's active jobs hold (see
// contracts.Job.HeldItems): the jobs holding slots are the plain jobs and
// the parents, children hold none.
const itemsByTenantQuery = `SELECT tenant, sum(1 + children_total) FROM jobs INDEXED BY jobs_unfinished_slots
	WHERE finished_at IS NULL AND slots > 0 GROUP BY tenant`

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row of jobColumns. It returns sql.ErrNoRows unwrapped so
// callers can test for it.
func scanJob(sc rowScanner) (contracts.Job, error) {
	var b rowBuf
	return b.job(sc, nil)
}

// rowBuf receives the columns of a row: database/sql stores each value as
// the driver gave it (int64, float64, string or nil), with none of the
// conversions or allocations that typed destinations cost, and the job is
// built from them. One buffer reads row after row.
type rowBuf struct {
	vals [jobColumnCount + 1]any // rowid first, when asked for
	dest [jobColumnCount + 1]any // pointers to vals
}

// job scans a row of jobColumns, preceded by the row's rowid when rowid is
// not nil, and builds the job.
func (b *rowBuf) job(sc rowScanner, rowid *int64) (contracts.Job, error) {
	if b.dest[0] == nil {
		for i := range b.vals {
			b.dest[i] = &b.vals[i]
		}
	}
	dest, v := b.dest[1:], b.vals[1:]
	if rowid != nil {
		dest = b.dest[:]
	}
	// Scan sets every destination, or fails and the row is not used.
	if err := sc.Scan(dest...); err != nil {
		return contracts.Job{}, err
	}
	if rowid != nil {
		*rowid = colInt(b.vals[0])
	}
	j := contracts.Job{
		ID: colString(v[0]), Tenant: colString(v[1]), Kind: colString(v[2]),
		Payload: colJSON(v[3]), Key: colString(v[4]), Priority: int(colInt(v[5])),
		State: contracts.JobState(colString(v[6])), Claim: colInt(v[7]), Attempt: int(colInt(v[8])),
		MaxAttempts: int(colInt(v[9])), Worker: colString(v[10]), Error: colString(v[11]),
		Result: colJSON(v[12]), CancelRequested: colInt(v[14]) != 0,
		CreatedAt: fromNanos(colInt(v[15])), UpdatedAt: fromNanos(colInt(v[16])),
		StartedAt: colTime(v[17]), FinishedAt: colTime(v[18]), NextDispatchAt: colTime(v[19]),
		ClaimUntil: colTime(v[21]), HeartbeatAt: colTime(v[22]), RunAt: colTime(v[23]),
		ConcurrencyKey: colString(v[24]), ConcurrencyLimit: int(colInt(v[25])),
		FairAt: colFloat(v[27]), Parent: colString(v[28]),
		RunLimits: contracts.RunLimits{StallTimeout: contracts.Duration(colInt(v[36])), MaxRuntime: contracts.Duration(colInt(v[37]))},
	}
	if d, ok := v[20].(int64); ok {
		j.DispatchDeadline = fromNanos(d)
	}
	if p := colString(v[13]); p != "" {
		var pr contracts.Progress
		if err := json.Unmarshal([]byte(p), &pr); err != nil {
			return contracts.Job{}, fmt.Errorf("decode progress of job %s: %w", j.ID, err)
		}
		j.Progress = &pr
	}
	if in := colString(v[38]); in != "" {
		if err := json.Unmarshal([]byte(in), &j.Inputs); err != nil {
			return contracts.Job{}, fmt.Errorf("decode inputs of job %s: %w", j.ID, err)
		}
	}
	if v[39] != nil || v[40] != nil {
		j.Resources = &contracts.Resources{CPU: colFloat(v[39]), Memory: colInt(v[40])}
	}
	if u := colString(v[41]); u != "" {
		var us contracts.Usage
		if err := json.Unmarshal([]byte(u), &us); err != nil {
			return contracts.Job{}, fmt.Errorf("decode usage of job %s: %w", j.ID, err)
		}
		j.Usage = &us
	}
	if j.Parent != "" {
		index := int(colInt(v[29]))
		j.Index = &index
	}
	if window := int(colInt(v[30])); window > 0 {
		// A parent: pending counts the running children too until
		// withRunning counts them.
		children := contracts.ChildCounts{Total: int(colInt(v[32])), Succeeded: int(colInt(v[33])),
			Failed: int(colInt(v[34])), Cancelled: int(colInt(v[35]))}
		j.Concurrency, j.FailFast = window, colInt(v[31]) != 0
		children.Pending = children.Total - children.Finished()
		j.Children = &children
		j.Progress = children.Progress()
	}
	if e := colString(v[26]); e != "" {
		var rows []runErrorRow
		if err := json.Unmarshal([]byte(e), &rows); err != nil {
			return contracts.Job{}, fmt.Errorf("decode errors of job %s: %w", j.ID, err)
		}
		j.Errors = make([]contracts.RunError, len(rows))
		for i, r := range rows {
			j.Errors[i] = contracts.RunError{Attempt: r.Run, Claim: r.Claim, Error: r.Error, At: r.At}
		}
	}
	return j, nil
}

// colString is a TEXT column's value; NULL is "".
func colString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// colInt is an INTEGER column's value; NULL is 0.
func colInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return 0
}

// colFloat is a REAL column's value; NULL is 0.
func colFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return 0
}

// colTime is a time column's value (UTC unix nanoseconds); NULL is nil.
func colTime(v any) *time.Time {
	n, ok := v.(int64)
	if !ok {
		return nil
	}
	t := fromNanos(n)
	return &t
}

// colJSON is a JSON TEXT column's value; NULL or "" is nil.
func colJSON(v any) json.RawMessage {
	if s := colString(v); s != "" {
		return json.RawMessage(s)
	}
	return nil
}

// scanJobs reads every row of rows and closes it.
func scanJobs(rows *sql.Rows) ([]contracts.Job, error) {
	defer func() { _ = rows.Close() }()
	var (
		jobs []contracts.Job
		buf  rowBuf
	)
	for rows.Next() {
		j, err := buf.job(rows, nil)
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

// resourcesArgs bind a resource request as its cpu and memory columns,
// both NULL when there is none.
func resourcesArgs(r *contracts.Resources) (cpu, memory any) {
	if r == nil {
		return nil, nil
	}
	return r.CPU, r.Memory
}

// usageArg binds a run's usage as JSON TEXT, or NULL.
func usageArg(u *contracts.Usage) (any, error) {
	if u == nil {
		return nil, nil
	}
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("encode usage: %w", err)
	}
	return string(b), nil
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

func boolArg(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runErrorRow is a run error as the errors column stores it. Its keys
// are those the column has always held ("run" the run number, "attempt"
// the claim), so that rows written before and after the API renamed them
// (contracts.RunError: "attempt" the run, "claim" the claim) read alike
// and no migration rewrites them.
type runErrorRow struct {
	Run   int       `json:"run"`
	Claim int64     `json:"attempt"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// runErrorsArg binds a job's run errors as JSON TEXT, or NULL when none.
func runErrorsArg(errs []contracts.RunError) (any, error) {
	if len(errs) == 0 {
		return nil, nil
	}
	rows := make([]runErrorRow, len(errs))
	for i, e := range errs {
		rows[i] = runErrorRow{Run: e.Attempt, Claim: e.Claim, Error: e.Error, At: e.At}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("encode run errors: %w", err)
	}
	return string(b), nil
}
