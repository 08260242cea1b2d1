package contracts

import (
	"encoding/json"
	"time"
)

// Job is a job as the store keeps it and the API shows it.
type Job struct {
	ID       string          `json:"id"`
	Tenant   string          `json:"tenant"`
	Kind     string          `json:"kind"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority"`
	State    JobState        `json:"state"`
	// Attempt is the job's run number: 1 during and after its first run,
	// one more for every run that starts (a retry, a requeue that ran
	// again); 0 while it never ran. MaxAttempts limits it. (Until release
	// 0.13 the JSON "attempt" was the claim, and "runs" this number; "runs"
	// is still written, as a deprecated alias, for one release.)
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// Claim is the fencing counter: it grows by one on every dispatch
	// claim, including those that never became a run (a worker answered
	// busy, an offer was lost, a requeue). A worker's heartbeats and
	// results carry the claim they were given, and the store applies them
	// only while the job is still at that claim. It is not a run count.
	Claim    int64           `json:"claim"`
	Worker   string          `json:"worker,omitempty"`
	Error    string          `json:"error,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Progress *Progress       `json:"progress,omitempty"`
	// Errors are the errors of the job's failed runs, oldest first, at most
	// MaxRunErrors.
	Errors []RunError `json:"errors,omitempty"`

	// RunAt is when the job was asked to run at the earliest (nil: at once).
	RunAt *time.Time `json:"run_at,omitempty"`
	// ConcurrencyKey with ConcurrencyLimit bounds how many of the tenant's
	// jobs with that key run at once.
	ConcurrencyKey   string `json:"concurrency_key,omitempty"`
	ConcurrencyLimit int    `json:"concurrency_limit,omitempty"`
	// RunLimits stop a run that makes no progress or takes too long.
	RunLimits
	// Inputs are the files the run needs, pinned by digest.
	Inputs []InputRef `json:"inputs,omitempty"`
	// Resources are what the job declared it needs (nil: its worker's
	// default for the kind); fan-out children inherit the parent's.
	Resources *Resources `json:"resources,omitempty"`
	// Usage is what the job's last finished run used, as its worker
	// measured it.
	Usage *Usage `json:"usage,omitempty"`
	// FairAt is the job's place in its tenant's fair queue (start-time fair
	// queuing), stamped at admission; the store orders ready jobs by it.
	FairAt float64 `json:"-"`

	CancelRequested bool `json:"cancel_requested,omitempty"`

	// Parent is the id of the fan-out this job is a child of ("" for any
	// other job), and Index its position in the parent's items.
	Parent string `json:"parent,omitempty"`
	Index  *int   `json:"index,omitempty"`
	// Concurrency is a parent's window: at most that many of its children
	// run at once (0 for any other job). FailFast cancels the children
	// still waiting at the first child that fails.
	Concurrency int  `json:"concurrency,omitempty"`
	FailFast    bool `json:"fail_fast,omitempty"`
	// Children are a parent's children by state.
	Children *ChildCounts `json:"children,omitempty"`

	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	StartedAt        *time.Time `json:"started_at,omitempty"`
	FinishedAt       *time.Time `json:"finished_at,omitempty"`
	NextDispatchAt   *time.Time `json:"next_dispatch_at,omitempty"`
	DispatchDeadline time.Time  `json:"dispatch_deadline"`
	ClaimUntil       *time.Time `json:"claim_until,omitempty"`
	HeartbeatAt      *time.Time `json:"heartbeat_at,omitempty"`
}

// Progress is what a handler last reported about a running job.
type Progress struct {
	Percent float64 `json:"percent"`
	Stage   string  `json:"stage,omitempty"`
	Message string  `json:"message,omitempty"`
}

// Lease names one claim of one job: the fencing token of every heartbeat
// and result.
type Lease struct {
	JobID string `json:"job_id"`
	// Claim is the job's claim the worker holds (Job.Claim). Its wire
	// name is still "attempt" in this release; "claim" is read too (see
	// WireClaim).
	Claim int64 `json:"attempt"`
	claimNext
}

// JobPage is one page of GET /v1/jobs.
type JobPage struct {
	Jobs []Job `json:"jobs"`
	// NextCursor fetches the next (older) page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Stats is the body of GET /v1/stats. An operator (open mode, or a tenant
// of SLUICE_GATEWAY_OPERATOR_TENANTS) sees the whole system; any other tenant in
// token mode sees itself only: Active, Counts, TenantActive and
// RecentRejections of its own jobs and requests, no Workers and no
// RecentScaleRequests.
type Stats struct {
	MaxActive       int              `json:"max_active"`
	TenantMaxActive int              `json:"tenant_max_active"`
	Active          int              `json:"active"`
	Counts          map[JobState]int `json:"counts"`
	TenantActive    map[string]int   `json:"tenant_active,omitempty"`
	Workers         []WorkerInfo     `json:"workers"`
	// RecentRejections are the latest requests this gateway answered 429
	// (admission caps and rate limits), newest first, at most
	// MaxRecentRejections; only the caller's own unless it is an operator. Each
	// gateway keeps its own in memory: they are lost on restart.
	RecentRejections []Rejection `json:"recent_rejections"`
	// RecentScaleRequests are the schedulers' latest requests for one more
	// worker (spawn on overflow), newest first, as this gateway heard them.
	RecentScaleRequests []ScaleRequest `json:"recent_scale_requests,omitempty"`
}

// WorkerInfo is one live worker as the roster last heard of it.
type WorkerInfo struct {
	ID       string    `json:"id"`
	Kinds    []string  `json:"kinds"`
	Capacity int       `json:"capacity"`
	InFlight int       `json:"in_flight"`
	Draining bool      `json:"draining,omitempty"`
	Spawned  bool      `json:"spawned,omitempty"`
	Version  string    `json:"version,omitempty"`
	SeenAt   time.Time `json:"seen_at"`
	// Resources is the worker's capacity and FreeResources what its
	// running jobs' declarations leave of it, as it last reported them;
	// KindResources its defaults by kind (see ResourceDefaults). All
	// absent from a worker that does not count resources.
	Resources     *Resources           `json:"resources,omitempty"`
	FreeResources *Resources           `json:"free_resources,omitempty"`
	KindResources map[string]Resources `json:"kind_resources,omitempty"`
	// Isolation is the walls the worker puts around an exec run's
	// programs (absent when it runs no exec jobs).
	Isolation Isolation `json:"isolation,omitempty"`
}

// LastSignOfLife is when a running job last showed its worker had it: its
// latest acknowledged heartbeat, or its start when none came yet; nil when
// it has neither.
func (j Job) LastSignOfLife() *time.Time {
	if j.HeartbeatAt != nil {
		return j.HeartbeatAt
	}
	return j.StartedAt
}

// Stale is the stale rule, written once for the reaper that finds stale
// jobs and the scheduler that re-checks them before requeueing: a job whose
// last sign of life is threshold old or older (or that has none) is stale.
func (j Job) Stale(now time.Time, threshold time.Duration) bool {
	last := j.LastSignOfLife()
	return last == nil || now.Sub(*last) >= threshold
}

// Delayed reports whether the job may not run yet at now: its run_at is
// still to come.
func (j Job) Delayed(now time.Time) bool {
	return j.RunAt != nil && j.RunAt.After(now)
}
