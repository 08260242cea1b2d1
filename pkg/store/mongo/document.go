package mongo

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The fields of a job document. Every name the driver writes or queries is
// spelled here once.
const (
	fID        = "_id"
	fTenant    = "tenant"
	fKind      = "kind"
	fPayload   = "payload"
	fKey       = "key"
	fActiveKey = "active_key"
	fPriority  = "priority"
	fState     = "state"
	// fClaim holds the claim (Job.Claim) and fRuns the run number
	// (Job.Attempt): the fields keep the names they had before the API
	// renamed the two, as renaming them would need every document rewritten.
	fClaim            = "attempt"
	fRuns             = "runs"
	fMaxAttempts      = "max_attempts"
	fWorker           = "worker"
	fError            = "error"
	fResult           = "result"
	fProgress         = "progress"
	fCancelRequested  = "cancel_requested"
	fCreatedAt        = "created_at"
	fUpdatedAt        = "updated_at"
	fStartedAt        = "started_at"
	fFinishedAt       = "finished_at"
	fNextDispatchAt   = "next_dispatch_at"
	fDispatchDeadline = "dispatch_deadline"
	fClaimUntil       = "claim_until"
	fHeartbeatAt      = "heartbeat_at"
	fRunAt            = "run_at"
	fConcurrencyKey   = "concurrency_key"
	fConcurrencyLimit = "concurrency_limit"
	fErrors           = "errors"
	fFairAt           = "fair_at"
	// Fan-out (fanout.go).
	fParent            = "parent"
	fItemIndex         = "item_index"
	fReleased          = "released"
	fWindow            = "window_size"
	fFailFast          = "fail_fast"
	fWeight            = "weight"
	fChildrenTotal     = "children_total"
	fChildrenReleased  = "children_released"
	fChildrenSucceeded = "children_succeeded"
	fChildrenFailed    = "children_failed"
	fChildrenCancelled = "children_cancelled"
	// fResources is the job's resource request, fUsage what its last
	// finished run used.
	fResources = "resources"
	fUsage     = "usage"
)

// stateHeld is the stored state of a fan-out child waiting for a place in
// its parent's window: pending to everyone outside the driver, but out of
// every query of pending jobs (the ready queue, the sweeps), which all
// match state "pending" exactly. Releasing the child sets it pending.
const stateHeld = "held"

// jobDoc is a job as the jobs collection holds it.
//
// Times are BSON datetimes: UTC, millisecond precision (finer digits are
// cut off on the way in, so what Admit and Transition return is what Get
// reads later). An optional time that is not set is a missing field, never
// null, so that {field: null} and the sparse indexes see it as absent.
//
// Result is the caller's JSON text, kept byte for byte as a string: the
// store never looks inside it. The payload and the inputs live in the
// job's body (body.go), and Body says it has one; Payload and Inputs are
// read only from documents written before that split.
//
// ActiveKey is set only while a job with a dedup key is active (see
// activeKey); the sparse unique index on it is what makes dedup exact.
type jobDoc struct {
	ID               string       `bson:"_id"`
	Tenant           string       `bson:"tenant"`
	Kind             string       `bson:"kind"`
	Payload          string       `bson:"payload,omitempty"`
	Body             bool         `bson:"body,omitempty"`
	Key              string       `bson:"key,omitempty"`
	ActiveKey        string       `bson:"active_key,omitempty"`
	Priority         int          `bson:"priority"`
	State            string       `bson:"state"`
	Claim            int64        `bson:"attempt"`
	Attempt          int          `bson:"runs"`
	MaxAttempts      int          `bson:"max_attempts"`
	Worker           string       `bson:"worker,omitempty"`
	Error            string       `bson:"error,omitempty"`
	Result           string       `bson:"result,omitempty"`
	Progress         *progressDoc `bson:"progress,omitempty"`
	CancelRequested  bool         `bson:"cancel_requested,omitempty"`
	CreatedAt        time.Time    `bson:"created_at"`
	UpdatedAt        time.Time    `bson:"updated_at"`
	StartedAt        *time.Time   `bson:"started_at,omitempty"`
	FinishedAt       *time.Time   `bson:"finished_at,omitempty"`
	NextDispatchAt   *time.Time   `bson:"next_dispatch_at,omitempty"`
	DispatchDeadline *time.Time   `bson:"dispatch_deadline,omitempty"`
	ClaimUntil       *time.Time   `bson:"claim_until,omitempty"`
	HeartbeatAt      *time.Time   `bson:"heartbeat_at,omitempty"`
	RunAt            *time.Time   `bson:"run_at,omitempty"`
	ConcurrencyKey   string       `bson:"concurrency_key,omitempty"`
	ConcurrencyLimit int          `bson:"concurrency_limit,omitempty"`
	Errors           []runErrDoc  `bson:"errors,omitempty"`
	FairAt           float64      `bson:"fair_at"`

	// A fan-out child: its parent, its index, and whether it was released
	// into its parent's window (one held is not).
	Parent    string `bson:"parent,omitempty"`
	ItemIndex *int   `bson:"item_index,omitempty"`
	Released  bool   `bson:"released,omitempty"`
	// A fan-out parent: its window, its tenant's weight in the fair queue
	// and its children's counts (the next index to release, and those that
	// ended).
	Window            int     `bson:"window_size,omitempty"`
	FailFast          bool    `bson:"fail_fast,omitempty"`
	Weight            float64 `bson:"weight,omitempty"`
	ChildrenTotal     int     `bson:"children_total,omitempty"`
	ChildrenReleased  int     `bson:"children_released,omitempty"`
	ChildrenSucceeded int     `bson:"children_succeeded,omitempty"`
	ChildrenFailed    int     `bson:"children_failed,omitempty"`
	ChildrenCancelled int     `bson:"children_cancelled,omitempty"`

	// A run's limits, in nanoseconds (0 = none).
	StallTimeout int64 `bson:"stall_timeout,omitempty"`
	MaxRuntime   int64 `bson:"max_runtime,omitempty"`
	// Inputs are the run's pinned inputs, in a document written before
	// the split (see Payload).
	Inputs []inputDoc `bson:"inputs,omitempty"`
	// Resources is the job's resource request (absent: none declared),
	// Usage what its last finished run used.
	Resources *resourcesDoc `bson:"resources,omitempty"`
	Usage     *usageDoc     `bson:"usage,omitempty"`
}

// resourcesDoc is a resource request, as a subdocument: cores and bytes.
type resourcesDoc struct {
	CPU    float64 `bson:"cpu"`
	Memory int64   `bson:"memory"`
}

func toResourcesDoc(r *contracts.Resources) *resourcesDoc {
	if r == nil {
		return nil
	}
	return &resourcesDoc{CPU: r.CPU, Memory: r.Memory}
}

// usageDoc is what a run used, as a subdocument.
type usageDoc struct {
	Mechanism  string  `bson:"mechanism"`
	PeakMemory int64   `bson:"peak_memory"`
	CPUSeconds float64 `bson:"cpu_seconds"`
}

func toUsageDoc(u *contracts.Usage) *usageDoc {
	if u == nil {
		return nil
	}
	return &usageDoc{Mechanism: string(u.Mechanism), PeakMemory: u.PeakMemory, CPUSeconds: u.CPUSeconds}
}

// inputDoc is one pinned input, as a subdocument.
type inputDoc struct {
	Name    string `bson:"name"`
	URI     string `bson:"uri"`
	SHA256  string `bson:"sha256"`
	Version string `bson:"version,omitempty"`
}

func toInputDocs(ins []contracts.InputRef) []inputDoc {
	var out []inputDoc
	for _, in := range ins {
		out = append(out, inputDoc{Name: in.Name, URI: in.URI, SHA256: in.SHA256, Version: in.Version})
	}
	return out
}

func fromInputDocs(docs []inputDoc) []contracts.InputRef {
	var out []contracts.InputRef
	for _, in := range docs {
		out = append(out, contracts.InputRef{Name: in.Name, URI: in.URI, SHA256: in.SHA256, Version: in.Version})
	}
	return out
}

// runErrDoc is one run's error, as a subdocument.
type runErrDoc struct {
	Run   int       `bson:"run"`
	Claim int64     `bson:"attempt"`
	Error string    `bson:"error"`
	At    time.Time `bson:"at"`
}

func toRunErrDocs(errs []contracts.RunError) []runErrDoc {
	if len(errs) == 0 {
		return nil
	}
	out := make([]runErrDoc, len(errs))
	for i, e := range errs {
		out[i] = runErrDoc{Run: e.Attempt, Claim: e.Claim, Error: e.Error, At: millis(e.At)}
	}
	return out
}

func fromRunErrDocs(docs []runErrDoc) []contracts.RunError {
	if len(docs) == 0 {
		return nil
	}
	out := make([]contracts.RunError, len(docs))
	for i, e := range docs {
		out[i] = contracts.RunError{Attempt: e.Run, Claim: e.Claim, Error: e.Error, At: e.At.UTC()}
	}
	return out
}

// progressDoc is a job's last progress report, as a subdocument.
type progressDoc struct {
	Percent float64 `bson:"percent"`
	Stage   string  `bson:"stage,omitempty"`
	Message string  `bson:"message,omitempty"`
}

// newJobDoc is the document Admit inserts for job: all but its body
// (newBodyDoc).
func newJobDoc(j contracts.Job) jobDoc {
	d := jobDoc{
		ID:               j.ID,
		Tenant:           j.Tenant,
		Kind:             j.Kind,
		Body:             hasBody(j),
		Key:              j.Key,
		Priority:         j.Priority,
		State:            string(j.State),
		Claim:            j.Claim,
		Attempt:          j.Attempt,
		MaxAttempts:      j.MaxAttempts,
		Worker:           j.Worker,
		Error:            j.Error,
		Result:           string(j.Result),
		Progress:         toProgressDoc(j.Progress),
		CancelRequested:  j.CancelRequested,
		CreatedAt:        millis(j.CreatedAt),
		UpdatedAt:        millis(j.UpdatedAt),
		StartedAt:        ptrMillis(j.StartedAt),
		FinishedAt:       ptrMillis(j.FinishedAt),
		NextDispatchAt:   ptrMillis(j.NextDispatchAt),
		DispatchDeadline: ptrMillis(&j.DispatchDeadline),
		ClaimUntil:       ptrMillis(j.ClaimUntil),
		HeartbeatAt:      ptrMillis(j.HeartbeatAt),
		RunAt:            ptrMillis(j.RunAt),
		ConcurrencyKey:   j.ConcurrencyKey,
		ConcurrencyLimit: j.ConcurrencyLimit,
		Errors:           toRunErrDocs(j.Errors),
		FairAt:           j.FairAt,
		Parent:           j.Parent,
		ItemIndex:        j.Index,
		Window:           j.Concurrency,
		FailFast:         j.FailFast,
		StallTimeout:     int64(j.StallTimeout),
		MaxRuntime:       int64(j.MaxRuntime),
		Resources:        toResourcesDoc(j.Resources),
		Usage:            toUsageDoc(j.Usage),
	}
	if j.Children != nil {
		d.ChildrenTotal = j.Children.Total
	}
	if j.Key != "" && j.State.Active() {
		d.ActiveKey = activeKey(j.Tenant, j.Key)
	}
	return d
}

// job turns a stored document back into a contracts.Job.
func (d jobDoc) job() contracts.Job {
	state := contracts.JobState(d.State)
	if d.State == stateHeld {
		state = contracts.StatePending
	}
	j := contracts.Job{
		ID:              d.ID,
		Tenant:          d.Tenant,
		Kind:            d.Kind,
		Payload:         rawJSON(d.Payload),
		Key:             d.Key,
		Priority:        d.Priority,
		State:           state,
		Claim:           d.Claim,
		Attempt:         d.Attempt,
		MaxAttempts:     d.MaxAttempts,
		Worker:          d.Worker,
		Error:           d.Error,
		Result:          rawJSON(d.Result),
		CancelRequested: d.CancelRequested,
		CreatedAt:       d.CreatedAt.UTC(),
		UpdatedAt:       d.UpdatedAt.UTC(),
		StartedAt:       utcPtr(d.StartedAt),
		FinishedAt:      utcPtr(d.FinishedAt),
		NextDispatchAt:  utcPtr(d.NextDispatchAt),
		ClaimUntil:      utcPtr(d.ClaimUntil),
		HeartbeatAt:     utcPtr(d.HeartbeatAt),
		RunAt:           utcPtr(d.RunAt),
		ConcurrencyKey:  d.ConcurrencyKey,

		ConcurrencyLimit: d.ConcurrencyLimit,
		Errors:           fromRunErrDocs(d.Errors),
		FairAt:           d.FairAt,
		Parent:           d.Parent,
		FailFast:         d.FailFast,
		RunLimits: contracts.RunLimits{StallTimeout: contracts.Duration(d.StallTimeout),
			MaxRuntime: contracts.Duration(d.MaxRuntime)},
	}
	j.Inputs = fromInputDocs(d.Inputs)
	if d.Resources != nil {
		j.Resources = &contracts.Resources{CPU: d.Resources.CPU, Memory: d.Resources.Memory}
	}
	if d.Usage != nil {
		j.Usage = &contracts.Usage{Mechanism: contracts.LimitMechanism(d.Usage.Mechanism),
			PeakMemory: d.Usage.PeakMemory, CPUSeconds: d.Usage.CPUSeconds}
	}
	if d.Parent != "" && d.ItemIndex != nil {
		i := *d.ItemIndex
		j.Index = &i
	}
	if d.Window > 0 {
		// A parent: pending counts the running children too until
		// countRunning counts them.
		j.Concurrency = d.Window
		c := d.counts()
		c.Pending = c.Total - c.Finished()
		j.Children = &c
	}
	if d.DispatchDeadline != nil {
		j.DispatchDeadline = d.DispatchDeadline.UTC()
	}
	if d.Progress != nil {
		j.Progress = &contracts.Progress{Percent: d.Progress.Percent, Stage: d.Progress.Stage, Message: d.Progress.Message}
	}
	if j.Children != nil {
		j.Progress = j.Children.Progress()
	}
	return j
}

// counts are a parent's children that ended, and their total.
func (d jobDoc) counts() contracts.ChildCounts {
	return contracts.ChildCounts{Total: d.ChildrenTotal, Succeeded: d.ChildrenSucceeded,
		Failed: d.ChildrenFailed, Cancelled: d.ChildrenCancelled}
}

// activeKey is the value of active_key for a tenant's dedup key: the
// tenant's length, the tenant, then the key, so that no two (tenant, key)
// pairs share it. One field, not a compound (tenant, key) index: a sparse
// compound index still holds every document that has one of its fields,
// and every job has a tenant.
func activeKey(tenant, key string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + ":" + key
}

func toProgressDoc(p *contracts.Progress) *progressDoc {
	if p == nil {
		return nil
	}
	return &progressDoc{Percent: p.Percent, Stage: p.Stage, Message: p.Message}
}

func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// millis is t as the store keeps it: UTC, cut to the millisecond.
func millis(t time.Time) time.Time {
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// ptrMillis is millis for an optional time; nil and the zero time are
// "not set".
func ptrMillis(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	m := millis(*t)
	return &m
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
