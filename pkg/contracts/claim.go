package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
)

// The run number and the claim. Until release 0.13 the JSON "attempt" of
// a job and of its events was the fencing counter, bumped on every
// dispatch claim, while "runs" counted the runs that max_attempts limits.
// Since 0.13 a job's "attempt" is its run number (what "runs" was) and the
// fencing counter is "claim", in the API (jobs, run errors, events) and in
// the Go names of every message.
//
// Compatibility for one release, written once here:
//
//   - Output of the API: a job also carries "runs" and a run error "run",
//     deprecated aliases of the new "attempt" (same meaning as before).
//     "attempt" itself changed meaning, so no alias can keep the old one.
//   - Input of the API (a job or event written by a server of an earlier
//     release, a run error stored by one): JSON without "claim" is read in
//     the old way, "attempt" as the claim and "runs" / "run" as the run.
//   - The messages between the services (offers, offer replies, results,
//     heartbeats and their acknowledgements, requeues, cancels, progress
//     reports): their decoders reject unknown fields, so a service of the
//     previous release would refuse a message with "claim". In a rolling
//     upgrade both releases run side by side, so this release still WRITES
//     the claim as "attempt" on these messages and READS it under either
//     name; the next release writes "claim", which every peer of this
//     release then understands, and the one after it stops reading
//     "attempt". Only then may these messages use "attempt" for the run
//     number (a worker of this release would read it as the claim).

// WireClaim is the name the messages between the services give the claim
// in this release (see the compatibility rules above); WireClaimNext is
// the name the next release writes, which this one reads too.
const (
	WireClaim     = "attempt"
	WireClaimNext = "claim"
)

// strictInto decodes one JSON value into v, rejecting unknown fields: the
// strictness of decodeStrict, for UnmarshalJSON methods (the outer
// decoder's DisallowUnknownFields does not reach them).
func strictInto(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newInnerDecodeError(data, explainDecode(data, reflect.TypeOf(v), err))
	}
	return nil
}

// foldClaim sets *claim from a message's claim given under its other wire
// name (next, nil when absent). A message giving both must give the same
// value.
func foldClaim(claim *int64, next *int64) error {
	if next == nil {
		return nil
	}
	if *claim != 0 && *claim != *next {
		return fmt.Errorf("%s %d and %s %d disagree", WireClaim, *claim, WireClaimNext, *next)
	}
	*claim = *next
	return nil
}

// UnmarshalJSON reads a job as this release writes it, or as an earlier
// one did (no "claim": "attempt" is the claim, "runs" the run number).
func (j *Job) UnmarshalJSON(data []byte) error {
	type plain Job
	var w struct {
		*plain
		Claim *int64 `json:"claim"`
		Runs  *int   `json:"runs"`
	}
	w.plain = (*plain)(j)
	// Not strict: a client reads the jobs of newer servers too.
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	switch {
	case w.Claim != nil:
		j.Claim = *w.Claim
	default: // an earlier release's job
		j.Claim, j.Attempt = int64(j.Attempt), 0
		if w.Runs != nil {
			j.Attempt = *w.Runs
		}
	}
	return nil
}

// MarshalJSON writes a job with "runs", the deprecated alias of
// "attempt", for one release. It escapes nothing itself (EncodeJSON): the
// encoder that called it escapes HTML or not, as it was told, so a
// payload still goes out as it was sent.
func (j Job) MarshalJSON() ([]byte, error) {
	type plain Job
	b, err := EncodeJSON(plain(j))
	if err != nil {
		return nil, err
	}
	// b is one JSON object: "runs" goes before its closing brace.
	b = append(b[:len(b)-1], `,"runs":`...)
	return append(strconv.AppendInt(b, int64(j.Attempt), 10), '}'), nil
}

// UnmarshalJSON reads an event as this release writes it, or as an
// earlier one did (no "claim": "attempt" is the claim; the run number is
// then unknown, 0).
func (e *Event) UnmarshalJSON(data []byte) error {
	type plain Event
	var w struct {
		*plain
		Claim *int64 `json:"claim"`
	}
	w.plain = (*plain)(e)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	if w.Claim != nil {
		e.Claim = *w.Claim
	} else { // an earlier release's event
		e.Claim, e.Attempt = int64(e.Attempt), 0
	}
	return nil
}

// UnmarshalJSON reads a run error as this release writes it, or as an
// earlier one did (no "claim": "attempt" is the claim, "run" the run).
func (e *RunError) UnmarshalJSON(data []byte) error {
	type plain RunError
	var w struct {
		*plain
		Claim *int64 `json:"claim"`
		Run   *int   `json:"run"`
	}
	w.plain = (*plain)(e)
	// Not strict, like the job that holds it.
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	switch {
	case w.Claim != nil:
		e.Claim = *w.Claim
	default: // an earlier release's run error
		e.Claim, e.Attempt = int64(e.Attempt), 0
		if w.Run != nil {
			e.Attempt = *w.Run
		}
	}
	return nil
}

// MarshalJSON writes a run error with "run", the deprecated alias of
// "attempt", for one release.
func (e RunError) MarshalJSON() ([]byte, error) {
	type plain RunError
	b, err := EncodeJSON(plain(e))
	if err != nil {
		return nil, err
	}
	b = append(b[:len(b)-1], `,"run":`...)
	return append(strconv.AppendInt(b, int64(e.Attempt), 10), '}'), nil
}

// UnmarshalJSON reads a lease with its claim under either wire name.
func (l *Lease) UnmarshalJSON(data []byte) error {
	type plain Lease
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(l)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&l.Claim, w.Next)
}

// UnmarshalJSON reads a requeue with its claim under either wire name.
func (m *Requeue) UnmarshalJSON(data []byte) error {
	type plain Requeue
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(m)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&m.Claim, w.Next)
}

// UnmarshalJSON reads a result with its claim under either wire name.
func (m *Result) UnmarshalJSON(data []byte) error {
	type plain Result
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(m)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&m.Claim, w.Next)
}

// UnmarshalJSON reads an offered job with its claim under either wire
// name.
func (s *JobSpec) UnmarshalJSON(data []byte) error {
	type plain JobSpec
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(s)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&s.Claim, w.Next)
}

// UnmarshalJSON reads an offer answer with its claim under either wire
// name.
func (m *OfferResult) UnmarshalJSON(data []byte) error {
	type plain OfferResult
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(m)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&m.Claim, w.Next)
}

// UnmarshalJSON reads a cancel request with its claim under either wire
// name.
func (m *CancelJob) UnmarshalJSON(data []byte) error {
	type plain CancelJob
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(m)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&m.Claim, w.Next)
}

// UnmarshalJSON reads a progress report with its claim under either wire
// name.
func (m *ProgressReport) UnmarshalJSON(data []byte) error {
	type plain ProgressReport
	var w struct {
		*plain
		Next *int64 `json:"claim"`
	}
	w.plain = (*plain)(m)
	if err := strictInto(data, &w); err != nil {
		return err
	}
	return foldClaim(&m.Claim, w.Next)
}
