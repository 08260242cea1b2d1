package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Store is what the services need from the database. Implementations are
// safe for concurrent use by many goroutines and many processes.
type Store interface {
	// Admit inserts job (state pending) if the admission caps allow it, all
	// in one atomic step. When job.Key is set and the tenant already has an
	// active job with that key, that job is returned with Joined and nothing
	// is written. A rejection writes nothing.
	Admit(ctx context.Context, job contracts.Job, caps Caps) (contracts.Job, Admission, error)

	// AdmitBatch admits each request as Admit would, in order: each job
	// sees the jobs admitted before it (their slots and dedup keys), and a
	// rejected or joined job does not stop the others. The embedded driver
	// does it in one transaction (a large batch a chunk per transaction);
	// the MongoDB driver one job after the other. An error may leave the jobs before the failing one admitted
	// (MongoDB; embedded: those of the chunks before the failing one,
	// when a large batch is admitted in chunks) and returns their
	// results with it.
	AdmitBatch(ctx context.Context, reqs []AdmitRequest) ([]AdmitResult, error)

	// Get returns one job by id, or ErrNotFound.
	Get(ctx context.Context, id string) (contracts.Job, error)

	// List returns a page of jobs, newest first, and the cursor of the next page.
	List(ctx context.Context, q Query) ([]contracts.Job, string, error)

	// Transition applies ch to the job if it is still at exp (compare-and-set)
	// and returns the job as it is afterwards. A miss is ErrConflict (or
	// ErrNotFound); a change the state machine forbids is ErrBadTransition.
	// Moving an active job to a final state releases its admission slot and
	// its dedup key.
	Transition(ctx context.Context, exp Expect, ch Change) (contracts.Job, error)

	// Update reads the job, asks decide for a change and applies it as a
	// compare-and-set on the state and claim it read, as Transition
	// would, and returns the job as it is afterwards. The embedded driver
	// does it in one write transaction (no miss is possible); the MongoDB
	// driver reads, decides and compares again after a miss. A decide
	// error changes nothing and is returned wrapped; a missing job is
	// ErrNotFound. The job decide sees and the one returned may lack what
	// never changes after admission (Payload, Inputs): the embedded
	// driver reads the job's row without it. Get reads it.
	Update(ctx context.Context, id string, decide Decide) (contracts.Job, error)

	// UpdateEach is Update of many jobs at once: decide is asked about the
	// job of ids[i] with i, and each job's outcome is its own, the job
	// afterwards or the error Update would return for it alone. A job
	// named twice sees the first change. The embedded driver does it in
	// one write transaction; when that fails as a whole, nothing changed
	// and the error is returned. The MongoDB driver updates one job after
	// the other and never returns an error of its own.
	UpdateEach(ctx context.Context, ids []string, decide DecideEach) ([]Updated, error)

	// Heartbeat renews the leases workerID holds and records pending claims
	// the worker accepted as running. Each lease ends in exactly one of
	// Renewed, Kept, Promoted and Lost, as DecideLease says: a lease whose
	// stored heartbeat is younger than renewAfter is kept without a write
	// (renewAfter ≤ 0 writes every held lease). When no lease needs a
	// write, nothing is written: the embedded driver answers from a read
	// without taking the write lock.
	Heartbeat(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time, renewAfter time.Duration) (HeartbeatOutcome, error)

	// Claim takes the dispatch claim (claim + 1, claim_until = r.Until)
	// on up to r.Kinds[kind] of the best ready jobs of each kind, in one
	// atomic step, and returns them as they are afterwards, best first per
	// kind. Ready and best are defined by Ready and the ready order (see
	// ClaimRequest). A job another scheduler claimed first is skipped, never
	// returned twice.
	Claim(ctx context.Context, r ClaimRequest) ([]contracts.Job, error)

	// Stale returns up to q.Limit jobs the reaper or the schedulers' sweep
	// must look at: running jobs whose heartbeat is older than
	// q.HeartbeatBefore or that started before q.StartedBefore, and the
	// pending jobs q.DeadlineBefore and q.Kind select.
	Stale(ctx context.Context, q StaleQuery) ([]contracts.Job, error)

	// CancelParent cancels a fan-out parent: its waiting children end
	// cancelled at once, its running children get a cancel request, and
	// the parent is marked cancel_requested; it ends cancelled when its
	// last child ends (at once when none runs). It returns the parent as
	// it is afterwards and the running children that must be told. A job
	// that is not a parent is ErrBadTransition; one already finished is
	// returned as it is.
	CancelParent(ctx context.Context, id string, now time.Time, reason string) (contracts.Job, []contracts.Job, error)

	// PendingKinds returns, in name order, the kinds that have pending jobs
	// holding no dispatch claim: the kinds waiting for a worker.
	PendingKinds(ctx context.Context) ([]string, error)

	// Backlog counts the jobs of kind that are ready at now and hold no
	// dispatch claim (at most limit of them), and says when the oldest of
	// those counted was created: what waits for a free slot.
	Backlog(ctx context.Context, kind string, now time.Time, limit int) (int, time.Time, error)

	// Purge deletes up to limit finished jobs that finished before the given
	// time and says how many went.
	Purge(ctx context.Context, finishedBefore time.Time, limit int) (int, error)

	// Stats counts jobs by state and the admission slots each tenant's
	// active jobs hold.
	Stats(ctx context.Context) (Counts, error)

	// TenantCounts counts one tenant's jobs by state, fan-out children
	// included as Stats counts them (every state present, zeros
	// included): what that tenant may see of the store.
	TenantCounts(ctx context.Context, tenant string) (map[contracts.JobState]int, error)

	// Reconcile repairs any admission counters from the jobs themselves and
	// reports how far they had drifted (zero when exact).
	Reconcile(ctx context.Context) (int, error)

	// Ping checks the database answers.
	Ping(ctx context.Context) error

	// Close releases the driver's resources.
	Close() error
}

// Caps are the admission limits; 0 means no limit.
type Caps struct {
	Global int
	Tenant int
	// TenantItems bounds the tenant's items in flight: the sum of
	// contracts.Job.HeldItems over its active jobs (a plain job 1, a
	// fan-out parent 1 plus its items until it ends). It is checked and
	// taken in the same atomic step as the slots.
	TenantItems int
	// Weight is the tenant's share in fair queuing (see FairAt); 0 is 1.
	Weight float64
}

// AdmitRequest is one job of AdmitBatch and the caps it is admitted under.
type AdmitRequest struct {
	Job  contracts.Job
	Caps Caps
	// Items make Job a fan-out parent (Job.Concurrency is its window): the
	// store inserts one child per item with the parent, in the same
	// atomic step, and the parent holds Job.Slots() admission slots (see
	// CheckFanout).
	Items []json.RawMessage
}

// AdmitResult is the outcome of one job of AdmitBatch: the job as stored
// (Admitted), the active job it joined (Joined), or nothing (rejected).
type AdmitResult struct {
	Job       contracts.Job
	Admission Admission
}

// Admission is the outcome of Admit.
type Admission int

// Admission outcomes.
const (
	// Admitted: the job was inserted.
	Admitted Admission = iota + 1
	// Joined: an active job with the same key exists and was returned.
	Joined
	// RejectedGlobal: the global cap is reached; nothing was written.
	RejectedGlobal
	// RejectedTenant: the tenant's cap is reached; nothing was written.
	RejectedTenant
	// RejectedTenantItems: the tenant's items in flight would pass
	// Caps.TenantItems; nothing was written.
	RejectedTenantItems
)

// String names the outcome for logs and metrics.
func (a Admission) String() string {
	switch a {
	case Admitted:
		return "admitted"
	case Joined:
		return "joined"
	case RejectedGlobal:
		return "rejected_global"
	case RejectedTenant:
		return "rejected_tenant"
	case RejectedTenantItems:
		return "rejected_tenant_items"
	}
	return "unknown"
}

// Expect is the compare side of a compare-and-set.
type Expect struct {
	ID    string
	State contracts.JobState
	Claim int64
	// ClaimFreeAt, when set, also requires that the job holds no dispatch
	// claim lasting past this time.
	ClaimFreeAt time.Time
}

// Change is the set side of a compare-and-set. Fields left nil keep their
// value. The driver sets updated_at to Now, and on a final State also sets
// finished_at and clears the claim, next_dispatch_at and the dedup key.
type Change struct {
	Now   time.Time
	State contracts.JobState
	// Claim, when non-zero, is the new claim; it must be larger than the old one.
	Claim int64
	// IncAttempt counts one more run: the attempt (run number) grows by one as the job goes running.
	IncAttempt bool
	// Unstart undoes the start a claim wrote for a job no worker took:
	// the run number goes back by one, and the worker, started_at and
	// heartbeat_at are cleared. Only from running to pending.
	Unstart bool

	Worker          *string
	ClaimUntil      *time.Time // set; see ClearClaim
	ClearClaim      bool
	NextDispatchAt  *time.Time
	StartedAt       *time.Time
	HeartbeatAt     *time.Time
	Error           *string
	Result          json.RawMessage
	Progress        *contracts.Progress
	CancelRequested *bool
	// Errors, when not nil, replaces the job's run errors (the caller
	// appends with contracts.AppendRunError to what it read).
	Errors []contracts.RunError
	// Usage, when not nil, replaces what the job's last finished run used.
	Usage *contracts.Usage
}

// Query selects a page of jobs. Without Parent it lists top-level jobs
// (plain jobs and fan-out parents); with Parent, that parent's children.
type Query struct {
	Tenant string // "" = every tenant
	State  contracts.JobState
	Kind   string
	Parent string
	Limit  int
	Cursor string
}

// StaleQuery selects the jobs the reaper must look at. A zero time disables
// that part of the query.
type StaleQuery struct {
	Now             time.Time
	HeartbeatBefore time.Time
	StartedBefore   time.Time
	// DeadlineBefore finds pending jobs, holding no live claim, whose
	// dispatch deadline is at or before it: the dispatch deadline sweep.
	DeadlineBefore time.Time
	// Kind, when set, also finds pending jobs of that kind holding no
	// dispatch claim, whatever their times (up to Limit of them, in ready
	// order, each ordered by its created_at): the sweep of kinds no worker
	// runs.
	Kind  string
	Limit int
}

// HeartbeatOutcome sorts a heartbeat's leases.
type HeartbeatOutcome struct {
	// Renewed leases were running on this worker at that claim; their
	// heartbeat_at was written.
	Renewed []contracts.Lease
	// Kept leases were running on this worker at that claim with a stored
	// heartbeat younger than the renew point: held, nothing written.
	Kept []contracts.Lease
	// Promoted leases were pending claims at that claim and are now running on this worker.
	Promoted []contracts.Lease
	// Started holds the jobs of Promoted, in the same order, as they are
	// after the promotion (without payload), for change events and the
	// queue-wait metric.
	Started []contracts.Job
	// Lost leases are no longer this worker's: it must stop that work.
	Lost []contracts.Lease
	// Cancel lists held leases (renewed, kept or promoted) whose job a
	// user asked to cancel.
	Cancel []contracts.Lease
}

// Counts is what Stats returns.
type Counts struct {
	ByState      map[contracts.JobState]int
	TenantActive map[string]int
}

// Active is pending + running: every job, children of fan-outs included.
func (c Counts) Active() int {
	return c.ByState[contracts.StatePending] + c.ByState[contracts.StateRunning]
}

// Slots is the admission slots active jobs hold, what the global cap
// bounds: one per plain job, min(concurrency, items) per fan-out parent.
func (c Counts) Slots() int {
	n := 0
	for _, k := range c.TenantActive {
		n += k
	}
	return n
}
