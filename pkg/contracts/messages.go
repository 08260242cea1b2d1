package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Due says a job should be offered to workers now.
type Due struct {
	JobID string `json:"job_id"`
}

// RequeueReason says why a job is handed back for dispatch: the vocabulary
// of requeue events, the reaper's findings and the "reason" label of the
// requeue metrics.
type RequeueReason string

// Requeue reasons, set by the reaper or a worker giving a job back.
const (
	ReasonStale    RequeueReason = "stale"    // running, no sign of life for the stale threshold (Job.Stale)
	ReasonLost     RequeueReason = "lost"     // pending, its due message never arrived
	ReasonTimeout  RequeueReason = "timeout"  // running longer than the hard max runtime
	ReasonShutdown RequeueReason = "shutdown" // the worker stopped before the handler finished
)

// RequeueReasons lists every reason.
var RequeueReasons = []RequeueReason{ReasonStale, ReasonLost, ReasonTimeout, ReasonShutdown}

// Valid reports whether r is one of RequeueReasons.
func (r RequeueReason) Valid() bool { return slices.Contains(RequeueReasons, r) }

// Requeue asks the scheduler to take a claim back and dispatch the job
// again. It applies only while the job is still at State and Claim, and
// one on a WorkerRequeueSubject only for a job running on that worker.
type Requeue struct {
	JobID string `json:"job_id"`
	// Claim is the job's claim (Job.Claim); wire name WireClaim, and
	// WireClaimNext is read too.
	Claim int64 `json:"attempt"`
	claimNext
	State  JobState      `json:"state"`
	Reason RequeueReason `json:"reason"`
}

// Result is a worker's outcome for one claim of a job.
type Result struct {
	JobID string `json:"job_id"`
	// Claim is the job's claim (Job.Claim); wire name WireClaim, and
	// WireClaimNext is read too.
	Claim int64 `json:"attempt"`
	claimNext
	// WorkerID must be the worker whose ResultSubject carries the result.
	WorkerID string          `json:"worker_id"`
	State    JobState        `json:"state"`
	Error    string          `json:"error,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// Permanent says a failure must not be retried (see Permanent).
	Permanent bool `json:"permanent,omitempty"`
	// Usage is what the run used and how its limits were held (absent
	// from a worker that does not measure it).
	Usage *Usage `json:"usage,omitempty"`
}

// JobSpec is what a worker needs to run one claim of a job.
type JobSpec struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Kind   string `json:"kind"`
	// Claim is the job's claim (Job.Claim); wire name WireClaim, and
	// WireClaimNext is read too.
	Claim int64 `json:"attempt"`
	claimNext
	Payload  json.RawMessage `json:"payload,omitempty"`
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority"`
	// RunLimits are what the run may take; the worker stops it past them.
	RunLimits
	// Inputs are fetched and checked before the handler starts.
	Inputs []InputRef `json:"inputs,omitempty"`
	// Resources are what the job declared it needs; nil: the worker's
	// default for its kind.
	Resources *Resources `json:"resources,omitempty"`
}

// Offer asks one worker to take one claim of a job.
type Offer struct {
	Job JobSpec `json:"job"`
}

// OfferBatch asks one worker to take several claims at once, on the same
// subject as an Offer. The worker takes what its free slots allow (still
// never queuing) and answers one OfferReply whose Results say, in the same
// order, what it did with each.
type OfferBatch struct {
	Jobs []JobSpec `json:"jobs"`
}

// MaxOfferBatch bounds the jobs of one OfferBatch.
const MaxOfferBatch = 1024

// OfferResult is a worker's answer for one job of an OfferBatch.
type OfferResult struct {
	JobID string `json:"job_id"`
	// Claim is the job's claim (Job.Claim); wire name WireClaim, and
	// WireClaimNext is read too.
	Claim int64 `json:"attempt"`
	claimNext
	Status OfferStatus `json:"status"`
	Reason string      `json:"reason,omitempty"`
}

// OfferStatus is a worker's answer to an Offer.
type OfferStatus string

// Offer answers. Only accepted takes the job; the others rotate to the next worker.
const (
	OfferAccepted OfferStatus = "accepted"
	OfferBusy     OfferStatus = "busy"
	OfferRefused  OfferStatus = "refused" // unknown kind, draining, or a malformed offer
)

// OfferReply is a worker's answer, with its load so the scheduler's view of
// free capacity stays current.
type OfferReply struct {
	Status   OfferStatus `json:"status"`
	WorkerID string      `json:"worker_id"`
	InFlight int         `json:"in_flight"`
	Capacity int         `json:"capacity"`
	Reason   string      `json:"reason,omitempty"`
	// Resources and FreeResources are the worker's capacity and what
	// its running jobs' declarations leave of it (see Announce).
	Resources     *Resources `json:"resources,omitempty"`
	FreeResources *Resources `json:"free_resources,omitempty"`
	// Seq orders the worker's load reports (see Announce.Seq).
	Seq uint64 `json:"seq,omitempty"`
	// Results answers an OfferBatch job by job, in its order; Status is
	// then accepted when any job was, else busy when any was, else refused.
	Results []OfferResult `json:"results,omitempty"`
}

// Heartbeat renews a worker's leases. The first heartbeat of a claim
// (sent right after "accepted", before the handler starts) also records the
// job as running.
type Heartbeat struct {
	// WorkerID must be the worker whose HeartbeatSubject carries it.
	WorkerID string  `json:"worker_id"`
	Leases   []Lease `json:"leases"`
}

// HeartbeatAck answers a Heartbeat: leases the worker no longer holds (it
// must stop that work) and leases whose job a user asked to cancel.
type HeartbeatAck struct {
	Lost   []Lease `json:"lost,omitempty"`
	Cancel []Lease `json:"cancel,omitempty"`
	// Error is set when the heartbeat was malformed or could not be applied;
	// the worker treats it as no acknowledgement.
	Error string `json:"error,omitempty"`
}

// Announce is a worker telling everyone it is alive and how loaded it is.
type Announce struct {
	// WorkerID must be the worker whose AnnounceSubject carries it.
	WorkerID string   `json:"worker_id"`
	Kinds    []string `json:"kinds"`
	Capacity int      `json:"capacity"` // 0 = no limit
	InFlight int      `json:"in_flight"`
	Draining bool     `json:"draining,omitempty"`
	Leaving  bool     `json:"leaving,omitempty"`
	// IntervalMS is how often the worker announces; a view entry older than a few intervals is dropped.
	IntervalMS int64 `json:"interval_ms"`
	// Spawned says the worker was started on a ScaleRequest.
	Spawned bool `json:"spawned,omitempty"`
	// Version is the worker's release version (SLUICE_WORKER_VERSION).
	Version string `json:"version,omitempty"`
	// Resources is the worker's capacity (SLUICE_WORKER_CPU,
	// SLUICE_WORKER_MEMORY) and FreeResources what the declarations of
	// its running jobs leave of it (negative amounts read as 0); both
	// absent from a worker that does not count resources. A third bound
	// beside Capacity and InFlight, which still count jobs.
	Resources     *Resources `json:"resources,omitempty"`
	FreeResources *Resources `json:"free_resources,omitempty"`
	// KindResources are the resources the worker counts for a job of a
	// kind that declares none (SLUICE_WORKER_KIND_RESOURCES); a kind not
	// listed gets one slot's share (see ResourceDefaults).
	KindResources map[string]Resources `json:"kind_resources,omitempty"`
	// Isolation is the walls the worker puts around an exec run's
	// programs (absent from a worker that runs no exec jobs).
	Isolation Isolation `json:"isolation,omitempty"`
	// Seq orders a worker's load reports, its announcements and its offer
	// replies, which reach a scheduler by different routes: of two, the
	// one with the lower Seq was read earlier, and its InFlight is out of
	// date. It starts at the worker's start time in nanoseconds, so it
	// grows across restarts of the worker. 0 means unordered.
	Seq uint64 `json:"seq,omitempty"`
}

// announceSeq is how an announcement ends when it has a seq: json.Marshal
// writes the fields of Announce in order, and Seq, the last, only when set.
const announceSeq = `,"seq":`

// SplitAnnounce splits an announcement's JSON b into its cacheable part,
// appended to dst and returned as rest, and its seq: rest is b without a
// trailing seq member, which decodes (DecodeAnnounce) exactly as b does
// but for Seq, so that a worker's announcements that differ only in their
// seq share one rest. It splits only a seq written as the encoder writes
// it (a JSON integer without sign, exponent or leading zero that fits in
// a uint64, then the closing brace) after another member, and only when
// no key before it could name Seq too (a second "seq", in any case or
// escaped, makes b a duplicate key that DecodeAnnounce refuses, where its
// rest would decode); for anything else ok is false and rest is dst
// untouched.
func SplitAnnounce(dst, b []byte) (rest []byte, seq uint64, ok bool) {
	if len(b) == 0 || b[len(b)-1] != '}' {
		return dst, 0, false
	}
	i := bytes.LastIndex(b, []byte(announceSeq))
	if i < 0 {
		return dst, 0, false
	}
	// Another member comes before it: "{" then "}" would be an empty
	// object where b is not valid JSON.
	if before := bytes.TrimRight(b[:i], " \t\r\n"); len(before) == 0 || before[len(before)-1] == '{' {
		return dst, 0, false
	}
	if mayNameSeq(b[:i]) {
		return dst, 0, false
	}
	// ParseUint in base 10 takes digits only (no sign, no underscore) but
	// also leading zeros, which JSON does not.
	digits := b[i+len(announceSeq) : len(b)-1]
	if len(digits) > 1 && digits[0] == '0' {
		return dst, 0, false
	}
	seq, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return dst, 0, false
	}
	return append(append(dst, b[:i]...), '}'), seq, true
}

// mayNameSeq reports whether the text b might hold a key that names the
// field seq: "seq" in any case, or text whose escapes or non-ASCII
// letters (encoding/json folds 'ſ' to 's') this quick look does not read.
func mayNameSeq(b []byte) bool {
	for i, c := range b {
		switch {
		case c == '\\' || c >= utf8.RuneSelf:
			return true
		case i+3 <= len(b) && bytes.EqualFold(b[i:i+3], []byte("seq")):
			return true
		}
	}
	return false
}

// ScaleRequest asks for one more worker of Kind: Ready jobs of it found no
// free slot, the oldest waiting OldestWaitMS. Live is how many spawned
// workers were alive when it was made.
type ScaleRequest struct {
	Kind         string    `json:"kind"`
	Ready        int       `json:"ready"`
	OldestWaitMS int64     `json:"oldest_wait_ms"`
	Live         int       `json:"live"`
	At           time.Time `json:"at"`
	// Spawner is what acts on the request in the scheduler that made it
	// (its SLUICE_SCHEDULER_SPAWN): "command" or "dev"; empty when no spawner is
	// configured and the request is only published.
	Spawner string `json:"spawner,omitempty"`
}

// Free reports the announced free slots; -1 means unlimited.
func (a Announce) Free() int {
	if a.Capacity == 0 {
		return -1
	}
	if f := a.Capacity - a.InFlight; f > 0 {
		return f
	}
	return 0
}

// CancelJob asks a worker to stop one claim of a job.
type CancelJob struct {
	JobID string `json:"job_id"`
	// Claim is the job's claim (Job.Claim); wire name WireClaim, and
	// WireClaimNext is read too.
	Claim int64 `json:"attempt"`
	claimNext
}

// ValidWorkerID reports whether id can be used as a worker id: 1–64 letters,
// digits, '-' or '_' (it becomes a NATS subject token).
func ValidWorkerID(id string) bool { return validToken(id) }

// ValidJobID reports whether id has the shape of a job id: 1–64 letters,
// digits, '-' or '_'.
func ValidJobID(id string) bool { return validToken(id) }

// validToken reports whether s is 1–64 ASCII letters, digits, '-' or '_'.
// Every message a worker or scheduler decodes checks a few of these, so
// it is a loop over the bytes rather than a regular expression.
func validToken(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && !(c >= 'A' && c <= 'Z') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func checkLease(l Lease) error {
	if !ValidJobID(l.JobID) {
		return fmt.Errorf("job_id %q is not a job id", l.JobID)
	}
	if l.Claim < 1 {
		return fmt.Errorf("claim %d must be at least 1", l.Claim)
	}
	return nil
}

// DecodeDue decodes and checks a Due message.
func DecodeDue(data []byte) (Due, error) {
	var m Due
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if !ValidJobID(m.JobID) {
		return m, fmt.Errorf("due: job_id %q is not a job id", m.JobID)
	}
	return m, nil
}

// DecodeRequeue decodes and checks a Requeue message.
func DecodeRequeue(data []byte) (Requeue, error) {
	var m Requeue
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaim(&m.Claim, &m.claimNext); err != nil {
		return m, err
	}
	if !ValidJobID(m.JobID) || m.Claim < 0 {
		return m, fmt.Errorf("requeue: job_id %q claim %d is not a lease", m.JobID, m.Claim)
	}
	if !m.State.Active() {
		return m, fmt.Errorf("requeue: state %q is not pending or running", m.State)
	}
	if !m.Reason.Valid() {
		return m, fmt.Errorf("requeue: unknown reason %q", m.Reason)
	}
	return m, nil
}

// DecodeResult decodes and checks a Result message.
func DecodeResult(data []byte) (Result, error) {
	var m Result
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaim(&m.Claim, &m.claimNext); err != nil {
		return m, err
	}
	if err := checkResult(m); err != nil {
		return m, fmt.Errorf("result: %w", err)
	}
	return m, nil
}

// checkResult checks one decoded result.
func checkResult(m Result) error {
	if err := checkLease(Lease{JobID: m.JobID, Claim: m.Claim}); err != nil {
		return err
	}
	if !ValidWorkerID(m.WorkerID) {
		return fmt.Errorf("worker_id %q is not a worker id", m.WorkerID)
	}
	if !m.State.Final() {
		return fmt.Errorf("state %q is not final", m.State)
	}
	if m.State != StateSucceeded && ClassOf(m.Error) == "" {
		return fmt.Errorf("error %q has no class prefix", m.Error)
	}
	if m.Usage != nil {
		return m.Usage.Check()
	}
	return nil
}

// MaxResultsPerBatch bounds one ResultBatch.
const MaxResultsPerBatch = 1000

// ResultBatch carries the results a worker delivers together, on
// a ResultSubject like a single Result.
type ResultBatch struct {
	Results []Result `json:"results"`
}

// EncodeResultBatch is the ResultBatch of results already encoded one by
// one (each a Result's JSON), without decoding them again.
func EncodeResultBatch(results [][]byte) []byte { return encodeBatch("results", results) }

// EncodeOfferBatch is the OfferBatch of jobs already encoded one by one
// (each a JobSpec's JSON).
func EncodeOfferBatch(jobs [][]byte) []byte { return encodeBatch("jobs", jobs) }

// AppendOffer appends to dst the request that offers a worker the jobs
// whose JobSpecs specs holds, each already encoded (EncodeJSON): an Offer
// for one job, an OfferBatch for several.
func AppendOffer(dst []byte, specs [][]byte) []byte {
	n := len(`{"jobs":[]}`)
	for _, s := range specs {
		n += len(s) + 1
	}
	dst = slices.Grow(dst, n)
	if len(specs) == 1 {
		dst = append(dst, `{"job":`...)
		return append(append(dst, specs[0]...), '}')
	}
	return appendBatch(dst, "jobs", specs)
}

// encodeBatch is {"field":[items...]} of items that are JSON values.
func encodeBatch(field string, items [][]byte) []byte {
	n := len(field) + 8
	for _, it := range items {
		n += len(it) + 1
	}
	return appendBatch(make([]byte, 0, n), field, items)
}

// appendBatch appends {"field":[items...]} to dst.
func appendBatch(dst []byte, field string, items [][]byte) []byte {
	dst = append(dst, `{"`...)
	dst = append(dst, field...)
	dst = append(dst, `":[`...)
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, it...)
	}
	return append(dst, "]}"...)
}

// DecodeResults decodes and checks a message on a ResultSubject: a
// ResultBatch of 1 to MaxResultsPerBatch results, or one Result.
func DecodeResults(data []byte) ([]Result, error) {
	var b ResultBatch
	err := decodeStrict(data, &b)
	if err == nil {
		err = foldClaims("results", b.Results, foldResult)
	}
	if err != nil {
		if single, serr := DecodeResult(data); serr == nil {
			return []Result{single}, nil
		} else if !bytes.Contains(data, []byte(`"results"`)) {
			return nil, serr // not meant as a batch: say what is wrong with the result
		}
		return nil, err
	}
	if len(b.Results) == 0 || len(b.Results) > MaxResultsPerBatch {
		return nil, fmt.Errorf("results: %d results, want 1 to %d", len(b.Results), MaxResultsPerBatch)
	}
	for i, m := range b.Results {
		if err := checkResult(m); err != nil {
			return nil, fmt.Errorf("results[%d]: %w", i, err)
		}
	}
	return b.Results, nil
}

// DecodeOffer decodes and checks an Offer.
func DecodeOffer(data []byte) (Offer, error) {
	var m Offer
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldSpec(&m.Job); err != nil {
		return m, within("job", err)
	}
	if err := checkSpec(m.Job); err != nil {
		return m, fmt.Errorf("offer: %w", err)
	}
	return m, nil
}

// checkSpec checks one offered job.
func checkSpec(s JobSpec) error {
	if err := checkLease(Lease{JobID: s.ID, Claim: s.Claim}); err != nil {
		return err
	}
	if !ValidKind(s.Kind) {
		return fmt.Errorf("kind %q is not a kind", s.Kind)
	}
	if s.Resources != nil {
		return s.Resources.Validate("resources")
	}
	return nil
}

// DecodeOffers decodes a message on a worker's offer subject: an Offer or
// an OfferBatch of 1 to MaxOfferBatch jobs (batch true).
func DecodeOffers(data []byte) (jobs []JobSpec, batch bool, err error) {
	var b OfferBatch
	err = decodeStrict(data, &b)
	if err == nil {
		err = foldClaims("jobs", b.Jobs, foldSpec)
	}
	if err != nil {
		one, oerr := DecodeOffer(data)
		if oerr == nil {
			return []JobSpec{one.Job}, false, nil
		}
		if !bytes.Contains(data, []byte(`"jobs"`)) {
			return nil, false, oerr // not meant as a batch: say what is wrong with the offer
		}
		return nil, true, err
	}
	if len(b.Jobs) == 0 || len(b.Jobs) > MaxOfferBatch {
		return nil, true, fmt.Errorf("offer: %d jobs, want 1 to %d", len(b.Jobs), MaxOfferBatch)
	}
	for i, s := range b.Jobs {
		if err := checkSpec(s); err != nil {
			return nil, true, fmt.Errorf("offer: jobs[%d]: %w", i, err)
		}
	}
	return b.Jobs, true, nil
}

// DecodeOfferReply decodes and checks a worker's answer to an offer.
func DecodeOfferReply(data []byte) (OfferReply, error) {
	var m OfferReply
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaims("results", m.Results, foldOfferResult); err != nil {
		return m, err
	}
	switch m.Status {
	case OfferAccepted, OfferBusy, OfferRefused:
	default:
		return m, fmt.Errorf("offer reply: unknown status %q", m.Status)
	}
	if m.InFlight < 0 || m.Capacity < 0 {
		return m, errors.New("offer reply: negative in_flight or capacity")
	}
	if err := checkWorkerResources(m.Resources, m.FreeResources); err != nil {
		return m, fmt.Errorf("offer reply: %w", err)
	}
	for i, r := range m.Results {
		switch r.Status {
		case OfferAccepted, OfferBusy, OfferRefused:
		default:
			return m, fmt.Errorf("offer reply: results[%d]: unknown status %q", i, r.Status)
		}
	}
	return m, nil
}

// MaxLeasesPerHeartbeat bounds one heartbeat message.
const MaxLeasesPerHeartbeat = 10000

// DecodeHeartbeat decodes and checks a Heartbeat.
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var m Heartbeat
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaims("leases", m.Leases, foldLease); err != nil {
		return m, err
	}
	if !ValidWorkerID(m.WorkerID) {
		return m, fmt.Errorf("heartbeat: worker_id %q is not a worker id", m.WorkerID)
	}
	if len(m.Leases) > MaxLeasesPerHeartbeat {
		return m, fmt.Errorf("heartbeat: %d leases, at most %d", len(m.Leases), MaxLeasesPerHeartbeat)
	}
	for _, l := range m.Leases {
		if err := checkLease(l); err != nil {
			return m, fmt.Errorf("heartbeat: %w", err)
		}
	}
	return m, nil
}

// DecodeHeartbeatAck decodes a scheduler's answer to a heartbeat.
func DecodeHeartbeatAck(data []byte) (HeartbeatAck, error) {
	var m HeartbeatAck
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaims("lost", m.Lost, foldLease); err != nil {
		return m, err
	}
	if err := foldClaims("cancel", m.Cancel, foldLease); err != nil {
		return m, err
	}
	return m, nil
}

// DecodeAnnounce decodes and checks a worker announcement.
func DecodeAnnounce(data []byte) (Announce, error) {
	var m Announce
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if !ValidWorkerID(m.WorkerID) {
		return m, fmt.Errorf("announce: worker_id %q is not a worker id", m.WorkerID)
	}
	if m.Capacity < 0 || m.InFlight < 0 || m.IntervalMS < 0 {
		return m, errors.New("announce: negative capacity, in_flight or interval_ms")
	}
	for _, k := range m.Kinds {
		if !ValidKind(k) {
			return m, fmt.Errorf("announce: kind %q is not a kind", k)
		}
	}
	if err := checkWorkerResources(m.Resources, m.FreeResources); err != nil {
		return m, fmt.Errorf("announce: %w", err)
	}
	if m.Isolation != "" && !m.Isolation.Valid() {
		return m, fmt.Errorf("announce: isolation %q is not one of %q", m.Isolation, Isolations)
	}
	for k, r := range m.KindResources {
		if !ValidKind(k) {
			return m, fmt.Errorf("announce: kind_resources: %q is not a kind", k)
		}
		if err := r.Validate("kind_resources." + k); err != nil {
			return m, fmt.Errorf("announce: %w", err)
		}
	}
	return m, nil
}

// checkWorkerResources checks a worker's announced capacity and free
// resources: each a valid declaration (free ones are clamped at 0 before
// they are sent).
func checkWorkerResources(capacity, free *Resources) error {
	if capacity != nil {
		if err := capacity.Validate("resources"); err != nil {
			return err
		}
	}
	if free != nil {
		if err := free.Validate("free_resources"); err != nil {
			return err
		}
	}
	return nil
}

// DecodeCancelJob decodes and checks a cancel request.
func DecodeCancelJob(data []byte) (CancelJob, error) {
	var m CancelJob
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaim(&m.Claim, &m.claimNext); err != nil {
		return m, err
	}
	if err := checkLease(Lease{JobID: m.JobID, Claim: m.Claim}); err != nil {
		return m, fmt.Errorf("cancel: %w", err)
	}
	return m, nil
}
