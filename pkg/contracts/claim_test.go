package contracts_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// A job retried once after a busy refusal and a requeue: its second run,
// at its fifth claim.
func retriedJob() contracts.Job {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	return contracts.Job{
		ID: "j1", Tenant: "acme", Kind: "sleep", State: contracts.StateRunning,
		Attempt: 2, MaxAttempts: 3, Claim: 5, Worker: "w1", CreatedAt: at, UpdatedAt: at,
		Errors: []contracts.RunError{{Attempt: 1, Claim: 3, Error: "handler: boom", At: at}},
	}
}

func TestJobJSONAttemptIsTheRunClaimTheFence(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(retriedJob())
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	require.EqualValues(t, 2, fields["attempt"], "attempt is the run number: %s", b)
	require.EqualValues(t, 5, fields["claim"], "claim is the fencing counter: %s", b)
	require.EqualValues(t, 2, fields["runs"], "runs, the deprecated alias of attempt: %s", b)
	require.EqualValues(t, 3, fields["max_attempts"], "%s", b)
	runErr := fields["errors"].([]any)[0].(map[string]any)
	require.EqualValues(t, 1, runErr["attempt"], "a run error's attempt is its run: %s", b)
	require.EqualValues(t, 3, runErr["claim"], "%s", b)
	require.EqualValues(t, 1, runErr["run"], "run, the deprecated alias of attempt: %s", b)

	var back contracts.Job
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, retriedJob(), back)
}

func TestJobJSONOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	// Before 0.13 "attempt" was the claim and "runs" the run number; a
	// client of this release reads such a server's jobs the same way.
	old := `{"id":"j1","tenant":"acme","kind":"sleep","state":"running","attempt":5,"runs":2,"max_attempts":3,
		"worker":"w1","errors":[{"run":1,"attempt":3,"error":"handler: boom","at":"2026-11-27T10:00:00Z"}],
		"created_at":"2026-11-27T10:00:00Z","updated_at":"2026-11-27T10:00:00Z","dispatch_deadline":"0001-01-01T00:00:00Z"}`
	var j contracts.Job
	require.NoError(t, json.Unmarshal([]byte(old), &j))
	require.Equal(t, retriedJob(), j)

	require.Error(t, json.Unmarshal([]byte(`{"id":"j1","attempt":"two"}`), &j))
}

func TestEventJSONAttemptIsTheRunClaimTheFence(t *testing.T) {
	t.Parallel()
	ev := contracts.StateEvent(retriedJob())
	require.Equal(t, 2, ev.Attempt)
	require.EqualValues(t, 5, ev.Claim)
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"state","job_id":"j1","tenant":"acme","kind":"sleep","state":"running",
		"attempt":2,"claim":5,"worker":"w1","at":"2026-11-27T10:00:00Z"}`, string(b))
	back, err := contracts.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, ev, back)

	// An event an earlier release wrote to the stream: its attempt is the
	// claim, its run number unknown.
	old, err := contracts.DecodeEvent([]byte(`{"type":"state","job_id":"j1","tenant":"acme","state":"running","attempt":5,"worker":"w1","at":"2026-11-27T10:00:00Z"}`))
	require.NoError(t, err)
	require.EqualValues(t, 5, old.Claim)
	require.Zero(t, old.Attempt)

	_, err = contracts.DecodeEvent([]byte(`{"type":"state","job_id":"j1","state":"running","claim":5,"nope":1,"at":"2026-11-27T10:00:00Z"}`))
	require.Error(t, err, "unknown fields are still refused")
}

// The messages between the services write the claim as "attempt" in this
// release (peers of the previous one know no other name) and read it as
// "attempt" or "claim" (the name the next release writes).
func TestMessagesReadTheClaimUnderEitherName(t *testing.T) {
	t.Parallel()
	decoders := map[string]struct {
		decode func([]byte) (int64, error)
		body   string // a message with the claim as %s
	}{
		"result": {func(b []byte) (int64, error) { m, err := contracts.DecodeResult(b); return m.Claim, err },
			`{"job_id":"j1",%s,"worker_id":"w1","state":"succeeded"}`},
		"results": {func(b []byte) (int64, error) {
			m, err := contracts.DecodeResults(b)
			return first(m, err, func(r contracts.Result) int64 { return r.Claim })
		},
			`{"results":[{"job_id":"j1",%s,"worker_id":"w1","state":"succeeded"}]}`},
		"offer": {func(b []byte) (int64, error) { m, err := contracts.DecodeOffer(b); return m.Job.Claim, err },
			`{"job":{"id":"j1","kind":"sleep",%s}}`},
		"offers": {func(b []byte) (int64, error) {
			m, _, err := contracts.DecodeOffers(b)
			return first(m, err, func(s contracts.JobSpec) int64 { return s.Claim })
		},
			`{"jobs":[{"id":"j1","kind":"sleep",%s}]}`},
		"offer reply": {func(b []byte) (int64, error) {
			m, err := contracts.DecodeOfferReply(b)
			return first(m.Results, err, func(r contracts.OfferResult) int64 { return r.Claim })
		},
			`{"status":"busy","worker_id":"w1","in_flight":1,"capacity":1,"results":[{"job_id":"j1",%s,"status":"busy"}]}`},
		"heartbeat": {func(b []byte) (int64, error) {
			m, err := contracts.DecodeHeartbeat(b)
			return first(m.Leases, err, leaseClaim)
		},
			`{"worker_id":"w1","leases":[{"job_id":"j1",%s}]}`},
		"heartbeat ack": {func(b []byte) (int64, error) {
			m, err := contracts.DecodeHeartbeatAck(b)
			return first(m.Lost, err, leaseClaim)
		},
			`{"lost":[{"job_id":"j1",%s}]}`},
		"requeue": {func(b []byte) (int64, error) { m, err := contracts.DecodeRequeue(b); return m.Claim, err },
			`{"job_id":"j1",%s,"state":"running","reason":"stale"}`},
		"cancel": {func(b []byte) (int64, error) { m, err := contracts.DecodeCancelJob(b); return m.Claim, err },
			`{"job_id":"j1",%s}`},
		"progress": {func(b []byte) (int64, error) { m, err := contracts.DecodeProgressReport(b); return m.Claim, err },
			`{"job_id":"j1",%s,"worker_id":"w1","progress":{"percent":5}}`},
	}
	for name, d := range decoders {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				fields string
				want   int64 // 0: refused
			}{
				{`"attempt":7`, 7},
				{`"claim":7`, 7},
				{`"attempt":7,"claim":7`, 7},
				{`"attempt":7,"claim":8`, 0},
				{`"claim":7,"claim_x":1`, 0},
			} {
				got, err := d.decode([]byte(fmt.Sprintf(d.body, tc.fields)))
				if tc.want == 0 {
					require.Error(t, err, tc.fields)
					continue
				}
				require.NoError(t, err, tc.fields)
				require.Equal(t, tc.want, got, tc.fields)
			}
		})
	}

	// What this release writes: the claim as "attempt".
	for _, v := range []any{
		contracts.Result{JobID: "j1", Claim: 7, WorkerID: "w1", State: contracts.StateSucceeded},
		contracts.JobSpec{ID: "j1", Kind: "sleep", Claim: 7},
		contracts.Lease{JobID: "j1", Claim: 7},
		contracts.Requeue{JobID: "j1", Claim: 7, State: contracts.StateRunning, Reason: contracts.ReasonStale},
		contracts.CancelJob{JobID: "j1", Claim: 7},
		contracts.OfferResult{JobID: "j1", Claim: 7, Status: contracts.OfferBusy},
		contracts.ProgressReport{JobID: "j1", Claim: 7, WorkerID: "w1"},
	} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		require.EqualValues(t, 7, fields[contracts.WireClaim], "%T: %s", v, b)
		require.NotContains(t, fields, contracts.WireClaimNext, "%T: %s", v, b)
	}
}

func leaseClaim(l contracts.Lease) int64 { return l.Claim }

// first is the claim of the first of a decoded list.
func first[T any](list []T, err error, claim func(T) int64) (int64, error) {
	if err != nil || len(list) == 0 {
		return 0, err
	}
	return claim(list[0]), nil
}

func TestJobJSONKeepsUnknownFieldsOfNewerServers(t *testing.T) {
	t.Parallel()
	var j contracts.Job
	require.NoError(t, json.Unmarshal([]byte(`{"id":"j1","attempt":1,"claim":2,"future":true,"errors":[{"attempt":1,"claim":1,"error":"handler: x","future":1}]}`), &j))
	require.Equal(t, 1, j.Attempt)
	require.EqualValues(t, 2, j.Claim)
	require.Equal(t, []contracts.RunError{{Attempt: 1, Claim: 1, Error: "handler: x"}}, j.Errors)
}

func TestJobJSONLeavesEscapingToItsEncoder(t *testing.T) {
	t.Parallel()
	j := contracts.Job{ID: "j1", Payload: json.RawMessage(`{"s":"<a & b>"}`), Error: "handler: <x>"}
	b, err := contracts.EncodeJSON(j)
	require.NoError(t, err)
	require.Contains(t, string(b), `{"s":"<a & b>"}`, "the payload as it was sent")
	require.Contains(t, string(b), `"handler: <x>"`)
	b, err = json.Marshal(j)
	require.NoError(t, err)
	require.Contains(t, string(b), `\u003ca \u0026 b\u003e`, "json.Marshal escapes HTML, as it always did")
}
