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

// strictInto decodes one JSON value into v, rejecting unknown fields and
// duplicate keys: the strictness of decodeStrict, for UnmarshalJSON
// methods (the outer decoder's DisallowUnknownFields does not reach them,
// and the outer check of duplicate keys does not know their fields).
func strictInto(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newInnerDecodeError(data, explainDecode(data, reflect.TypeOf(v), err))
	}
	if de := checkDuplicateKeys(data, reflect.TypeOf(v), false); de != nil {
		return newInnerDecodeError(data, de)
	}
	return nil
}

// claimNext is the claim of a message between the services under its
// next wire name (WireClaimNext), embedded in each such message next to
// its Claim (wire name WireClaim). It is only read: the message's Decode
// function folds it into Claim (foldClaim) and clears it, so a decoded
// message holds its claim in Claim alone and is written back with
// WireClaim only. A plain field decoded in the same pass as the others
// (no UnmarshalJSON of its own, which would parse each message twice).
type claimNext struct {
	// ClaimNext is the claim as the next release writes it; nil when
	// absent, and always nil after decoding.
	ClaimNext *int64 `json:"claim,omitempty"`
}

// foldClaim sets *claim from a decoded message's claim given under its
// other wire name (next.ClaimNext, nil when absent) and clears that. A
// message giving both must give the same value; the error is a
// *DecodeError at the message's root (foldClaims puts the path of a
// message in a list in front).
func foldClaim(claim *int64, next *claimNext) error {
	if next.ClaimNext == nil {
		return nil
	}
	v := *next.ClaimNext
	next.ClaimNext = nil
	if *claim != 0 && *claim != v {
		return &DecodeError{Reason: fmt.Sprintf("%s %d and %s %d disagree", WireClaim, *claim, WireClaimNext, v)}
	}
	*claim = v
	return nil
}

// foldClaims folds the claims of a decoded list of messages, the list at
// path (its errors' paths start there).
func foldClaims[T any](path string, list []T, fold func(m *T) error) error {
	for i := range list {
		if err := fold(&list[i]); err != nil {
			return within(path+"["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

// within is err, a *DecodeError of a value at path, with its path
// starting there.
func within(path string, err error) error {
	if de, ok := err.(*DecodeError); ok {
		return de.under(path)
	}
	return err
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
// earlier one did (see readEvent). DecodeEvent reads events in one pass
// without it; this is for a json.Unmarshal of an Event (API clients).
func (e *Event) UnmarshalJSON(data []byte) error {
	return readEvent(e, func(v any) error { return strictInto(data, v) })
}

// eventFields is an Event without its methods, and eventWire an Event as
// read: its claim a pointer, so that an event without one is told apart.
type (
	eventFields Event
	eventWire   struct {
		*eventFields
		Claim *int64 `json:"claim"`
	}
)

// readEvent reads an event with decode (strict: unknown fields are
// refused) as this release writes it, or as an earlier one did (no
// "claim": "attempt" is the claim; the run number is then unknown, 0).
func readEvent(e *Event, decode func(v any) error) error {
	w := eventWire{eventFields: (*eventFields)(e)}
	if err := decode(&w); err != nil {
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

// The folds of the messages that come in lists, for foldClaims.
func foldResult(m *Result) error           { return foldClaim(&m.Claim, &m.claimNext) }
func foldSpec(s *JobSpec) error            { return foldClaim(&s.Claim, &s.claimNext) }
func foldLease(l *Lease) error             { return foldClaim(&l.Claim, &l.claimNext) }
func foldOfferResult(m *OfferResult) error { return foldClaim(&m.Claim, &m.claimNext) }
