package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
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
//     so is a job whose items would take the tenant's items in flight
//     past caps.TenantItems (store.RejectedTenantItems);
//  3. otherwise the job is inserted, both slot counters go up by its
//     slots and the tenant's items counter by its items.
//
// Joined and rejected admissions write nothing. The job must be pending at
// attempt 0 and have an id; a zero CreatedAt is taken as now and a zero
// UpdatedAt as CreatedAt. The returned job is the one stored, times in UTC.
func (s *Store) Admit(ctx context.Context, job contracts.Job, caps store.Caps) (contracts.Job, store.Admission, error) {
	in, err := newAdmitInput(store.AdmitRequest{Job: job, Caps: caps})
	if err != nil {
		return contracts.Job{}, 0, fmt.Errorf("sqlite: admit job %s: %w", job.ID, err)
	}
	var res []store.AdmitResult
	err = s.write(ctx, store.WriteAdmit, "admit job "+job.ID, func(tx *sql.Tx) error {
		var err error
		res, err = s.admitAll(ctx, tx, []admitInput{in})
		return err
	})
	if err != nil {
		return contracts.Job{}, 0, err
	}
	return res[0].Job, res[0].Admission, nil
}

// AdmitBatch admits every request as Admit would, one after the other: a
// job sees the jobs admitted before it in the batch (their slots, their
// dedup keys). Rejected and joined jobs write nothing. A batch is one
// write transaction, and an error admits nothing, unless it is large:
// the children of its fan-outs are then staged first (see stage.go), and
// a batch of more plain jobs than one chunk is admitted a chunk per
// transaction in the writer's bulk lane, so that other writes go in
// between; an error then leaves the chunks before it admitted, and
// AdmitBatch returns their results with it.
func (s *Store) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) ([]store.AdmitResult, error) {
	ins := make([]admitInput, len(reqs))
	plain := true
	for i, r := range reqs {
		in, err := newAdmitInput(r)
		if err != nil {
			return nil, fmt.Errorf("sqlite: admit batch: job %s: %w", r.Job.ID, err)
		}
		ins[i] = in
		plain = plain && len(in.items) == 0
	}
	if plain && len(ins) > s.plainChunks.next() {
		return s.admitChunked(ctx, ins)
	}
	// When the batch holds more children than one write transaction
	// should, its fan-outs' children go in first, a chunk at a time (see
	// stage.go).
	children := 0
	for _, in := range ins {
		children += len(in.items)
	}
	var staged []*admitInput
	unstage := func(keep func(i int) bool) {
		for i := range ins {
			if ins[i].stagedTo > 0 && !keep(i) {
				s.unstage(ctx, &ins[i])
			}
		}
	}
	for i := range ins {
		if children > s.chunks.next() && len(ins[i].items) > 0 {
			if err := s.stage(ctx, &ins[i]); err != nil {
				unstage(func(int) bool { return false })
				return nil, err
			}
			staged = append(staged, &ins[i])
		}
	}
	var out []store.AdmitResult
	err := s.write(ctx, store.WriteAdmit, fmt.Sprintf("admit a batch of %d jobs", len(reqs)), func(tx *sql.Tx) error {
		var err error
		out, err = s.admitAll(ctx, tx, ins)
		return err
	})
	if err != nil {
		unstage(func(int) bool { return false })
		return nil, err
	}
	if len(staged) > 0 {
		unstage(func(i int) bool { return out[i].Admission == store.Admitted })
	}
	return out, nil
}

// admitChunked admits a batch of plain jobs a chunk per transaction in
// the bulk lane, chunks sized by time (see stage.go), in order.
func (s *Store) admitChunked(ctx context.Context, ins []admitInput) ([]store.AdmitResult, error) {
	out := make([]store.AdmitResult, 0, len(ins))
	for from := 0; from < len(ins); {
		to := min(from+s.plainChunks.next(), len(ins))
		var res []store.AdmitResult
		took, err := s.writeBulk(ctx, store.WriteAdmit, fmt.Sprintf("admit jobs %d-%d of a batch of %d", from, to-1, len(ins)), func(tx *sql.Tx) error {
			var err error
			res, err = s.admitAll(ctx, tx, ins[from:to])
			return err
		})
		if err != nil {
			return out, err
		}
		s.plainChunks.took(to-from, took)
		out = append(out, res...)
		from = to
	}
	return out, nil
}

// admitInput is a checked job with its encoded columns, and a fan-out
// parent's items.
type admitInput struct {
	job                 contracts.Job
	caps                store.Caps
	progress, runErrors any
	items               []json.RawMessage
	// The columns the job does not show (see the schema).
	held, released int
	// inputs is the inputs column, usage the usage column.
	inputs, usage any
	// stagedTo is how many of a parent's children were staged: inserted
	// held before its admission (see stage.go).
	stagedTo int
}

// newAdmitInput checks a new job, fills its times and encodes its columns.
func newAdmitInput(r store.AdmitRequest) (admitInput, error) {
	job, caps := r.Job, r.Caps
	if err := store.CheckNewJob(job); err != nil {
		return admitInput{}, err
	}
	if err := store.CheckFanout(&job, r.Items); err != nil {
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
	inputs, err := inputsArg(job.Inputs)
	if err != nil {
		return admitInput{}, err
	}
	usage, err := usageArg(job.Usage)
	if err != nil {
		return admitInput{}, err
	}
	in := admitInput{job: job, caps: caps, progress: progress, runErrors: runErrors, items: r.Items, inputs: inputs, usage: usage}
	if job.IsParent() {
		in.held, in.released = 1, store.ReleasedAtAdmission(job.Concurrency, len(r.Items))
	}
	return in, nil
}

// scopeCount is a counter row as an admission sees it: what it read, and
// what the admissions of this transaction add.
type scopeCount struct {
	active, added int
	fairAt        float64
	// items is the tenant's items counter (store.ItemsScope), on a
	// tenant's scopeCount.
	items *scopeCount
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
		fanouts []fanoutRows
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
			if global == nil {
				g, err := s.counter(ctx, tx, store.GlobalScope)
				if err != nil {
					return nil, err
				}
				global = &scopeCount{active: g.active + g.delta, fairAt: g.fair}
			}
			c, err := s.counter(ctx, tx, store.TenantScope(job.Tenant))
			if err != nil {
				return nil, err
			}
			it, err := s.counter(ctx, tx, store.ItemsScope(job.Tenant))
			if err != nil {
				return nil, err
			}
			t = &scopeCount{active: c.active + c.delta, fairAt: c.fair, items: &scopeCount{active: it.active + it.delta}}
			tenants[job.Tenant] = t
		}
		if adm := store.DecideAdmission(job, caps, func(scope string) int {
			switch scope {
			case store.GlobalScope:
				return global.active + global.added
			case store.TenantScope(job.Tenant):
				return t.active + t.added
			}
			return t.items.active + t.items.added
		}); adm != store.Admitted {
			out[i] = store.AdmitResult{Admission: adm}
			continue
		}
		slots, items := job.Slots(), job.HeldItems()
		if job.IsParent() {
			// The parent is never dispatched; the children it releases
			// at once take their places in the fair queue.
			f := fanoutRows{parent: in, fairFrom: max(global.fairAt, t.fairAt)}
			w := weightArg(caps.Weight)
			t.fairAt = f.fairFrom + float64(in.released)/w
			fanouts = append(fanouts, f)
		} else {
			job.FairAt = store.FairAt(global.fairAt, t.fairAt, caps.Weight)
			t.fairAt = job.FairAt
		}
		if t.added == 0 {
			order = append(order, job.Tenant)
		}
		t.added += slots
		t.items.added += items
		global.added += slots
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
	for _, in := range rows {
		s.countMove(in.job.Tenant, "", in.job.State, 1)
	}
	for _, f := range fanouts {
		insert := s.insertChildren
		if f.parent.stagedTo > 0 {
			insert = s.releaseStaged
		}
		if err := insert(ctx, tx, f); err != nil {
			return nil, err
		}
	}
	// The counter rows take the admissions; they are written at the commit.
	if global != nil {
		s.counters.row(store.GlobalScope).delta += global.added
	}
	for _, tenant := range order {
		t := tenants[tenant]
		r := s.counters.row(store.TenantScope(tenant))
		r.delta += t.added
		r.fair, r.fairSet = t.fairAt, true
		s.counters.row(store.ItemsScope(tenant)).delta += t.items.added
	}
	return out, nil
}

// appendJobArgs appends a new job's row, in insertColumns order (its
// cold part is insertBodies').
func appendJobArgs(args []any, in admitInput) []any {
	job := in.job
	cpu, memory := resourcesArgs(job.Resources)
	return append(args,
		job.ID, job.Tenant, job.Kind, job.Key, job.Priority,
		string(job.State), job.Claim, job.Attempt, job.MaxAttempts, job.Worker, job.Error,
		jsonArg(job.Result), in.progress, boolArg(job.CancelRequested),
		job.CreatedAt.UnixNano(), job.UpdatedAt.UnixNano(), ptrNanos(job.StartedAt),
		ptrNanos(job.FinishedAt), ptrNanos(job.NextDispatchAt), nanos(job.DispatchDeadline),
		ptrNanos(job.ClaimUntil), ptrNanos(job.HeartbeatAt), ptrNanos(job.RunAt),
		job.ConcurrencyKey, job.ConcurrencyLimit, in.runErrors, job.FairAt,
		job.Parent, indexArg(job.Index), job.Concurrency, boolArg(job.FailFast),
		childArg(job.Children, func(c contracts.ChildCounts) int { return c.Total }),
		0, 0, 0, int64(job.StallTimeout), int64(job.MaxRuntime),
		cpu, memory, in.usage,
		in.held, job.Slots(), in.released, weightArg(in.caps.Weight))
}

// inputsArg binds a job's inputs as JSON TEXT, or NULL when none.
func inputsArg(in []contracts.InputRef) (any, error) {
	if len(in) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode inputs: %w", err)
	}
	return string(b), nil
}

// indexArg is a child's item_index column.
func indexArg(i *int) int {
	if i == nil {
		return 0
	}
	return *i
}

// childArg is one of a parent's counts, 0 for other jobs.
func childArg(c *contracts.ChildCounts, f func(contracts.ChildCounts) int) int {
	if c == nil {
		return 0
	}
	return f(*c)
}

// weightArg is the weight column: a tenant's weight in the fair queue.
func weightArg(w float64) float64 {
	if w <= 0 {
		return 1
	}
	return w
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
	activeByKeyQuery = `SELECT ` + jobColumns + ` FROM jobs` + bodyJoin + `
		WHERE tenant = ? AND key = ? AND key != '' AND state IN ` + activeStates + ` LIMIT 1`
	// A failed statement aborts only itself; the group commit then rolls
	// the request back to its savepoint.
	// insertColumns are the columns of a job's row (jobColumns but the
	// cold ones, see bodies.go) and those a job does not show.
	insertColumns = `id, tenant, kind, key, priority, state, attempt, runs,
	max_attempts, worker, error, result, progress, cancel_requested,
	created_at, updated_at, started_at, finished_at, next_dispatch_at,
	dispatch_deadline, claim_until, heartbeat_at, run_at, concurrency_key,
	concurrency_limit, errors, fair_at, parent, item_index, window_size,
	fail_fast, children_total, children_succeeded, children_failed,
	children_cancelled, stall_timeout, max_runtime, cpu, memory, usage,
	held, slots, children_released, weight`
	// insertColumnCount is the number of insertColumns.
	insertColumnCount = jobColumnCount - 2 + 4
)

// jobPlaceholders are one row's placeholders.
var jobPlaceholders = `(?` + strings.Repeat(`, ?`, insertColumnCount-1) + `)`

// insertJobQuery inserts one job.
var insertJobQuery = `INSERT INTO jobs (` + insertColumns + `) VALUES ` + jobPlaceholders

// activeByKey finds the tenant's active job with that dedup key, or
// sql.ErrNoRows.
func (s *Store) activeByKey(ctx context.Context, tx *sql.Tx, tenant, key string) (contracts.Job, error) {
	return scanJob(tx.StmtContext(ctx, s.ws.activeByKey).QueryRowContext(ctx, tenant, key))
}

// jobIn reads one job inside a write transaction, or sql.ErrNoRows.
func (s *Store) jobIn(ctx context.Context, tx *sql.Tx, id string) (contracts.Job, error) {
	return scanJob(tx.StmtContext(ctx, s.ws.getJob).QueryRowContext(ctx, id))
}

// jobRow is a job read in a write transaction and its row's rowid.
type jobRow struct {
	job   contracts.Job
	rowid int64
}

// jobRowsIn reads the jobs of ids inside a write transaction, with their
// rowids, by id; a missing job is absent.
func (s *Store) jobRowsIn(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*jobRow, error) {
	var buf rowBuf
	return byID(ctx, tx, s.ws.jobRows, ids, func(rows *sql.Rows) (string, *jobRow, error) {
		var (
			r   jobRow
			err error
		)
		r.job, err = buf.job(rows, &r.rowid)
		return r.job.ID, &r, err
	})
}

// jobRowIn is jobIn with the row's rowid, for an update of the row just
// read (see rowBuf.job).
func (s *Store) jobRowIn(ctx context.Context, tx *sql.Tx, id string) (contracts.Job, int64, error) {
	var (
		rowid int64
		buf   rowBuf
	)
	j, err := buf.job(tx.StmtContext(ctx, s.ws.jobRows.one).QueryRowContext(ctx, id), &rowid)
	return j, rowid, err
}
