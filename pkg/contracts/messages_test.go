package contracts

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeCase is one input of a decoder table: want is checked when ok.
type decodeCase[T any] struct {
	name string
	in   string
	want T
	ok   bool
}

func good[T any](name, in string, want T) decodeCase[T] {
	return decodeCase[T]{name: name, in: in, want: want, ok: true}
}

func bad[T any](name, in string) decodeCase[T] {
	return decodeCase[T]{name: name, in: in}
}

// runDecodeCases checks each case against decode; valid inputs must also
// survive json.Marshal and decoding again (same compares the two values).
func runDecodeCases[T any](t *testing.T, decode func([]byte) (T, error), same func(a, b T) bool, cases []decodeCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := decode([]byte(tc.in))
			if !tc.ok {
				if err == nil {
					t.Fatalf("decode(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode(%q): %v", tc.in, err)
			}
			if !same(got, tc.want) {
				t.Fatalf("decode(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			checkRoundTrip(t, got, decode, same)
		})
	}
}

// commonBad are inputs every decoder rejects.
func commonBad[T any]() []decodeCase[T] {
	return []decodeCase[T]{
		bad[T]("empty", ``),
		bad[T]("whitespace", " \n"),
		bad[T]("array", `[]`),
		bad[T]("string", `"x"`),
		bad[T]("truncated", `{"job_id":`),
		bad[T]("unknown field", `{"nope":1}`),
		bad[T]("two objects", `{} {}`),
		bad[T]("trailing comma", `{},`),
		bad[T]("trailing bracket", `{}]`),
		bad[T]("trailing brace", `{}}`),
		bad[T]("trailing garbage", `{}x`),
	}
}

func TestDecodeDue(t *testing.T) {
	t.Parallel()
	id64 := strings.Repeat("j", 64)
	cases := []decodeCase[Due]{
		good("simple", `{"job_id":"01HZX3K5ABCD"}`, Due{JobID: "01HZX3K5ABCD"}),
		good("dash and underscore", ` {"job_id" : "job_1-a"} `+"\n", Due{JobID: "job_1-a"}),
		good("64 chars", `{"job_id":"`+id64+`"}`, Due{JobID: id64}),
		bad[Due]("missing id", `{}`),
		bad[Due]("null", `null`),
		bad[Due]("empty id", `{"job_id":""}`),
		bad[Due]("65 chars", `{"job_id":"`+id64+`j"}`),
		bad[Due]("space", `{"job_id":"a b"}`),
		bad[Due]("dot", `{"job_id":"a.b"}`),
		bad[Due]("wildcard", `{"job_id":"*"}`),
		bad[Due]("non-ASCII", `{"job_id":"jöb"}`),
		bad[Due]("number id", `{"job_id":12}`),
		bad[Due]("trailing bracket after valid", `{"job_id":"a"}]`),
		bad[Due]("extra field", `{"job_id":"a","attempt":1}`),
	}
	runDecodeCases(t, DecodeDue, sameValue[Due], append(cases, commonBad[Due]()...))
}

func TestDecodeRequeue(t *testing.T) {
	t.Parallel()
	var cases []decodeCase[Requeue]
	for _, st := range ActiveStates {
		for _, reason := range RequeueReasons {
			cases = append(cases, good(fmt.Sprintf("%s %s", st, reason),
				fmt.Sprintf(`{"job_id":"j1","attempt":2,"state":%q,"reason":%q}`, st, reason),
				Requeue{JobID: "j1", Claim: 2, State: st, Reason: reason}))
		}
	}
	cases = append(cases,
		good("attempt 0 (never dispatched)", `{"job_id":"j1","attempt":0,"state":"pending","reason":"lost"}`,
			Requeue{JobID: "j1", State: StatePending, Reason: ReasonLost}),
		bad[Requeue]("negative attempt", `{"job_id":"j1","attempt":-1,"state":"pending","reason":"lost"}`),
		bad[Requeue]("bad job id", `{"job_id":"j 1","attempt":1,"state":"pending","reason":"lost"}`),
		bad[Requeue]("missing job id", `{"attempt":1,"state":"pending","reason":"lost"}`),
		bad[Requeue]("final state", `{"job_id":"j1","attempt":1,"state":"succeeded","reason":"lost"}`),
		bad[Requeue]("cancelled state", `{"job_id":"j1","attempt":1,"state":"cancelled","reason":"stale"}`),
		bad[Requeue]("missing state", `{"job_id":"j1","attempt":1,"reason":"lost"}`),
		bad[Requeue]("unknown state", `{"job_id":"j1","attempt":1,"state":"queued","reason":"lost"}`),
		bad[Requeue]("missing reason", `{"job_id":"j1","attempt":1,"state":"running"}`),
		bad[Requeue]("unknown reason", `{"job_id":"j1","attempt":1,"state":"running","reason":"bored"}`),
		bad[Requeue]("attempt as string", `{"job_id":"j1","attempt":"1","state":"running","reason":"stale"}`),
		bad[Requeue]("attempt fractional", `{"job_id":"j1","attempt":1.5,"state":"running","reason":"stale"}`),
	)
	runDecodeCases(t, DecodeRequeue, sameValue[Requeue], append(cases, commonBad[Requeue]()...))
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[Result]{
		good("succeeded with result", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":{"n": [1, 2]}}`,
			Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: StateSucceeded, Result: json.RawMessage(`{"n": [1, 2]}`)}),
		good("succeeded bare", `{"job_id":"j1","attempt":7,"worker_id":"w-1_a","state":"succeeded"}`,
			Result{JobID: "j1", Claim: 7, WorkerID: "w-1_a", State: StateSucceeded}),
		good("succeeded with null result", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":null}`,
			Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: StateSucceeded, Result: json.RawMessage(`null`)}),
		good("succeeded with html in result", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":"<b>&"}`,
			Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: StateSucceeded, Result: json.RawMessage(`"<b>&"`)}),
		good("failed handler", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"handler: boom"}`,
			Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: StateFailed, Error: "handler: boom"}),
		good("failed input", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"input: bad <json>"}`,
			Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: StateFailed, Error: "input: bad <json>"}),
		good("cancelled", `{"job_id":"j1","attempt":3,"worker_id":"w1","state":"cancelled","error":"cancelled: by user"}`,
			Result{JobID: "j1", Claim: 3, WorkerID: "w1", State: StateCancelled, Error: "cancelled: by user"}),
		bad[Result]("failed without class", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"boom"}`),
		bad[Result]("failed without error", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed"}`),
		bad[Result]("cancelled without class", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"cancelled","error":"by user"}`),
		bad[Result]("running", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"running"}`),
		bad[Result]("pending", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"pending"}`),
		bad[Result]("no state", `{"job_id":"j1","attempt":1,"worker_id":"w1"}`),
		bad[Result]("unknown state", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"done"}`),
		bad[Result]("attempt 0", `{"job_id":"j1","attempt":0,"worker_id":"w1","state":"succeeded"}`),
		bad[Result]("no attempt", `{"job_id":"j1","worker_id":"w1","state":"succeeded"}`),
		bad[Result]("bad job id", `{"job_id":"","attempt":1,"worker_id":"w1","state":"succeeded"}`),
		bad[Result]("bad worker id", `{"job_id":"j1","attempt":1,"worker_id":"w.1","state":"succeeded"}`),
		bad[Result]("no worker id", `{"job_id":"j1","attempt":1,"state":"succeeded"}`),
		bad[Result]("malformed result", `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":{]}`),
	}
	runDecodeCases(t, DecodeResult, sameResult, append(cases, commonBad[Result]()...))
}

func TestDecodeResults(t *testing.T) {
	t.Parallel()
	one := `{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded"}`
	two := `{"job_id":"j2","attempt":3,"worker_id":"w1","state":"failed","error":"handler: boom"}`
	for name, tc := range map[string]struct {
		data    string
		want    []string // job ids
		wantErr string
	}{
		"single result":       {data: one, want: []string{"j1"}},
		"batch":               {data: `{"results":[` + one + `,` + two + `]}`, want: []string{"j1", "j2"}},
		"empty batch":         {data: `{"results":[]}`, wantErr: "0 results"},
		"null batch":          {data: `{"results":null}`, wantErr: "0 results"},
		"bad result in batch": {data: `{"results":[` + one + `,{"job_id":"j3","attempt":1,"worker_id":"w1","state":"running"}]}`, wantErr: `results[1]: state "running" is not final`},
		"unknown batch field": {data: `{"results":[` + one + `],"x":1}`, wantErr: "unknown field"},
		"bad single result":   {data: `{"job_id":"j1","attempt":0,"worker_id":"w1","state":"succeeded"}`, wantErr: "claim 0"},
		"trailing data":       {data: one + `x`, wantErr: "trailing"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeResults([]byte(tc.data))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, r := range got {
				ids = append(ids, r.JobID)
			}
			require.Equal(t, tc.want, ids)
		})
	}
	batch := EncodeResultBatch([][]byte{[]byte(one), []byte(two)})
	got, err := DecodeResults(batch)
	require.NoError(t, err, string(batch))
	require.Len(t, got, 2)
	offers, isBatch, err := DecodeOffers(EncodeOfferBatch([][]byte{[]byte(`{"id":"j1","kind":"a","attempt":1}`)}))
	require.NoError(t, err)
	require.True(t, isBatch)
	require.Len(t, offers, 1)

	many := make([]string, MaxResultsPerBatch+1)
	for i := range many {
		many[i] = one
	}
	_, err = DecodeResults([]byte(`{"results":[` + strings.Join(many, ",") + `]}`))
	require.ErrorContains(t, err, "want 1 to 1000")
}

func TestDecodeOffers(t *testing.T) {
	t.Parallel()
	one := `{"id":"j1","kind":"a","attempt":1}`
	two := `{"id":"j2","kind":"a","attempt":2,"payload":{"n":1}}`
	for name, tc := range map[string]struct {
		data    string
		want    []string
		batch   bool
		wantErr string
	}{
		"single offer":     {data: `{"job":` + one + `}`, want: []string{"j1"}},
		"batch":            {data: `{"jobs":[` + one + `,` + two + `]}`, want: []string{"j1", "j2"}, batch: true},
		"empty batch":      {data: `{"jobs":[]}`, wantErr: "0 jobs", batch: true},
		"bad job in batch": {data: `{"jobs":[` + one + `,{"id":"j3","kind":"a","attempt":0}]}`, wantErr: "jobs[1]: claim 0", batch: true},
		"bad kind":         {data: `{"job":{"id":"j1","kind":"","attempt":1}}`, wantErr: "is not a kind"},
		"both shapes":      {data: `{"job":` + one + `,"jobs":[` + one + `]}`, wantErr: "unknown field", batch: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, batch, err := DecodeOffers([]byte(tc.data))
			require.Equal(t, tc.batch, batch)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, s := range got {
				ids = append(ids, s.ID)
			}
			require.Equal(t, tc.want, ids)
		})
	}
	_, err := DecodeOfferReply([]byte(`{"status":"accepted","worker_id":"w1","in_flight":1,"capacity":2,"results":[{"job_id":"j1","attempt":1,"status":"maybe"}]}`))
	require.ErrorContains(t, err, `results[0]: unknown status "maybe"`)
}

func TestDecodeOffer(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[Offer]{
		good("full", `{"job":{"id":"j1","tenant":"acme","kind":"email.send","attempt":2,"payload":{"to":"a@b"},"key":"k","priority":5}}`,
			Offer{Job: JobSpec{ID: "j1", Tenant: "acme", Kind: "email.send", Claim: 2, Payload: json.RawMessage(`{"to":"a@b"}`), Key: "k", Priority: 5}}),
		good("minimal", `{"job":{"id":"j1","kind":"a","attempt":1}}`,
			Offer{Job: JobSpec{ID: "j1", Kind: "a", Claim: 1}}),
		bad[Offer]("no job", `{}`),
		bad[Offer]("null job", `{"job":null}`),
		bad[Offer]("attempt 0", `{"job":{"id":"j1","kind":"a","attempt":0}}`),
		bad[Offer]("bad id", `{"job":{"id":"j/1","kind":"a","attempt":1}}`),
		bad[Offer]("missing kind", `{"job":{"id":"j1","attempt":1}}`),
		bad[Offer]("bad kind", `{"job":{"id":"j1","kind":"Email","attempt":1}}`),
		bad[Offer]("unknown job field", `{"job":{"id":"j1","kind":"a","attempt":1,"state":"pending"}}`),
		bad[Offer]("flat spec", `{"id":"j1","kind":"a","attempt":1}`),
	}
	runDecodeCases(t, DecodeOffer, sameOffer, append(cases, commonBad[Offer]()...))
}

func TestDecodeOfferReply(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[OfferReply]{
		good("accepted", `{"status":"accepted","worker_id":"w1","in_flight":3,"capacity":4,"seq":7}`,
			OfferReply{Status: OfferAccepted, WorkerID: "w1", InFlight: 3, Capacity: 4, Seq: 7}),
		good("busy", `{"status":"busy","worker_id":"w1","in_flight":4,"capacity":4}`,
			OfferReply{Status: OfferBusy, WorkerID: "w1", InFlight: 4, Capacity: 4}),
		good("refused with reason", `{"status":"refused","worker_id":"w1","in_flight":0,"capacity":0,"reason":"draining"}`,
			OfferReply{Status: OfferRefused, WorkerID: "w1", Reason: "draining"}),
		bad[OfferReply]("no status", `{"worker_id":"w1"}`),
		bad[OfferReply]("unknown status", `{"status":"ok","worker_id":"w1"}`),
		bad[OfferReply]("status case", `{"status":"Accepted","worker_id":"w1"}`),
		bad[OfferReply]("negative in_flight", `{"status":"busy","worker_id":"w1","in_flight":-1,"capacity":1}`),
		bad[OfferReply]("negative capacity", `{"status":"busy","worker_id":"w1","in_flight":0,"capacity":-1}`),
		bad[OfferReply]("capacity as string", `{"status":"busy","worker_id":"w1","capacity":"4"}`),
	}
	runDecodeCases(t, DecodeOfferReply, sameValue[OfferReply], append(cases, commonBad[OfferReply]()...))
}

func TestDecodeHeartbeat(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[Heartbeat]{
		good("no leases", `{"worker_id":"w1"}`, Heartbeat{WorkerID: "w1"}),
		good("null leases", `{"worker_id":"w1","leases":null}`, Heartbeat{WorkerID: "w1"}),
		good("empty leases", `{"worker_id":"w1","leases":[]}`, Heartbeat{WorkerID: "w1", Leases: []Lease{}}),
		good("leases", `{"worker_id":"w1","leases":[{"job_id":"j1","attempt":1},{"job_id":"j2","attempt":9}]}`,
			Heartbeat{WorkerID: "w1", Leases: []Lease{{JobID: "j1", Claim: 1}, {JobID: "j2", Claim: 9}}}),
		good("max leases", heartbeatJSON(MaxLeasesPerHeartbeat), Heartbeat{WorkerID: "w1", Leases: leases(MaxLeasesPerHeartbeat)}),
		bad[Heartbeat]("too many leases", heartbeatJSON(MaxLeasesPerHeartbeat+1)),
		bad[Heartbeat]("no worker id", `{"leases":[]}`),
		bad[Heartbeat]("bad worker id", `{"worker_id":"w 1"}`),
		bad[Heartbeat]("long worker id", `{"worker_id":"`+strings.Repeat("w", 65)+`"}`),
		bad[Heartbeat]("lease attempt 0", `{"worker_id":"w1","leases":[{"job_id":"j1","attempt":0}]}`),
		bad[Heartbeat]("lease bad job id", `{"worker_id":"w1","leases":[{"job_id":"j1","attempt":1},{"job_id":"","attempt":1}]}`),
		bad[Heartbeat]("lease unknown field", `{"worker_id":"w1","leases":[{"job_id":"j1","attempt":1,"x":1}]}`),
		bad[Heartbeat]("leases an object", `{"worker_id":"w1","leases":{}}`),
	}
	runDecodeCases(t, DecodeHeartbeat, sameValue[Heartbeat], append(cases, commonBad[Heartbeat]()...))
}

func leases(n int) []Lease {
	out := make([]Lease, n)
	for i := range out {
		out[i] = Lease{JobID: fmt.Sprintf("j%d", i), Claim: 1}
	}
	return out
}

func heartbeatJSON(n int) string {
	data, err := json.Marshal(Heartbeat{WorkerID: "w1", Leases: leases(n)})
	if err != nil {
		panic(err)
	}
	return string(data)
}

func TestDecodeHeartbeatAck(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[HeartbeatAck]{
		good("empty", `{}`, HeartbeatAck{}),
		good("null", `null`, HeartbeatAck{}),
		good("empty lists", `{"lost":[],"cancel":null}`, HeartbeatAck{}),
		good("lost and cancel", `{"lost":[{"job_id":"j1","attempt":1}],"cancel":[{"job_id":"j2","attempt":2}]}`,
			HeartbeatAck{Lost: []Lease{{JobID: "j1", Claim: 1}}, Cancel: []Lease{{JobID: "j2", Claim: 2}}}),
		good("error", `{"error":"heartbeat: worker_id \"bad id\" is not a worker id"}`,
			HeartbeatAck{Error: `heartbeat: worker_id "bad id" is not a worker id`}),
		bad[HeartbeatAck]("lost not a list", `{"lost":{"job_id":"j1"}}`),
		bad[HeartbeatAck]("error not a string", `{"error":true}`),
		bad[HeartbeatAck]("lease unknown field", `{"cancel":[{"job_id":"j1","attempt":1,"worker_id":"w"}]}`),
	}
	runDecodeCases(t, DecodeHeartbeatAck, sameAck, append(cases, commonBad[HeartbeatAck]()...))
}

func TestDecodeAnnounce(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[Announce]{
		good("full", `{"worker_id":"w1","kinds":["email","img.resize"],"capacity":8,"in_flight":3,"draining":true,"interval_ms":2000,"seq":1795000000000000042}`,
			Announce{WorkerID: "w1", Kinds: []string{"email", "img.resize"}, Capacity: 8, InFlight: 3, Draining: true, IntervalMS: 2000, Seq: 1795000000000000042}),
		good("leaving", `{"worker_id":"w1","kinds":[],"capacity":0,"in_flight":0,"leaving":true,"interval_ms":0}`,
			Announce{WorkerID: "w1", Kinds: []string{}, Leaving: true}),
		good("minimal", `{"worker_id":"w1"}`, Announce{WorkerID: "w1"}),
		good("in_flight above capacity", `{"worker_id":"w1","capacity":1,"in_flight":5}`, Announce{WorkerID: "w1", Capacity: 1, InFlight: 5}),
		bad[Announce]("no worker id", `{"kinds":["a"]}`),
		bad[Announce]("bad worker id", `{"worker_id":"w>"}`),
		bad[Announce]("negative capacity", `{"worker_id":"w1","capacity":-1}`),
		bad[Announce]("negative in_flight", `{"worker_id":"w1","in_flight":-1}`),
		bad[Announce]("negative interval", `{"worker_id":"w1","interval_ms":-1}`),
		bad[Announce]("bad kind", `{"worker_id":"w1","kinds":["ok","Not OK"]}`),
		bad[Announce]("empty kind", `{"worker_id":"w1","kinds":[""]}`),
		bad[Announce]("kinds a string", `{"worker_id":"w1","kinds":"email"}`),
		bad[Announce]("draining a string", `{"worker_id":"w1","draining":"yes"}`),
	}
	runDecodeCases(t, DecodeAnnounce, sameValue[Announce], append(cases, commonBad[Announce]()...))
}

func TestDecodeCancelJob(t *testing.T) {
	t.Parallel()
	cases := []decodeCase[CancelJob]{
		good("simple", `{"job_id":"j1","attempt":1}`, CancelJob{JobID: "j1", Claim: 1}),
		good("large attempt", `{"job_id":"j1","attempt":9223372036854775807}`, CancelJob{JobID: "j1", Claim: 1<<63 - 1}),
		bad[CancelJob]("attempt 0", `{"job_id":"j1","attempt":0}`),
		bad[CancelJob]("no attempt", `{"job_id":"j1"}`),
		bad[CancelJob]("negative attempt", `{"job_id":"j1","attempt":-3}`),
		bad[CancelJob]("attempt overflows", `{"job_id":"j1","attempt":9223372036854775808}`),
		bad[CancelJob]("bad job id", `{"job_id":"j1!","attempt":1}`),
		bad[CancelJob]("no job id", `{"attempt":1}`),
	}
	runDecodeCases(t, DecodeCancelJob, sameValue[CancelJob], append(cases, commonBad[CancelJob]()...))
}

func TestValidIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in               string
		worker, job, kin bool
	}{
		{"w1", true, true, true},
		{"worker-1_A", true, true, false},
		{"01HZX3K5ABCDEFG", true, true, false},
		{"_", true, true, false},
		{"-", true, true, false},
		{"a", true, true, true},
		{"0", true, true, true},
		{strings.Repeat("a", 64), true, true, true},
		{strings.Repeat("a", 65), false, false, false},
		{"", false, false, false},
		{"img.resize", false, false, true},
		{"a_b-c.d", false, false, true},
		{"_a", true, true, false},
		{".a", false, false, false},
		{"a b", false, false, false},
		{"a*", false, false, false},
		{"a>", false, false, false},
		{"a/b", false, false, false},
		{"a\n", false, false, false},
		{"ä", false, false, false},
		{"Email", true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if got := ValidWorkerID(tt.in); got != tt.worker {
				t.Errorf("ValidWorkerID(%q) = %v, want %v", tt.in, got, tt.worker)
			}
			if got := ValidJobID(tt.in); got != tt.job {
				t.Errorf("ValidJobID(%q) = %v, want %v", tt.in, got, tt.job)
			}
			if got := ValidKind(tt.in); got != tt.kin {
				t.Errorf("ValidKind(%q) = %v, want %v", tt.in, got, tt.kin)
			}
		})
	}
}

func TestWorkerSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id                                                   string
		offer, cancel, announce, heartbeat, progress, result string
		requeue                                              string
	}{
		{"w1", "sluice.worker.offer.w1", "sluice.worker.cancel.w1", "sluice.worker.announce.w1", "sluice.heartbeat.w1",
			"sluice.progress.w1", "sluice.jobs.result.w1", "sluice.jobs.requeue.w1"},
		{"host-7_a", "sluice.worker.offer.host-7_a", "sluice.worker.cancel.host-7_a", "sluice.worker.announce.host-7_a",
			"sluice.heartbeat.host-7_a", "sluice.progress.host-7_a", "sluice.jobs.result.host-7_a", "sluice.jobs.requeue.host-7_a"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct{ name, got, want string }{
				{"WorkerOfferSubject", WorkerOfferSubject(tt.id), tt.offer},
				{"WorkerCancelSubject", WorkerCancelSubject(tt.id), tt.cancel},
				{"AnnounceSubject", AnnounceSubject(tt.id), tt.announce},
				{"HeartbeatSubject", HeartbeatSubject(tt.id), tt.heartbeat},
				{"ProgressSubject", ProgressSubject(tt.id), tt.progress},
				{"ResultSubject", ResultSubject(tt.id), tt.result},
				{"WorkerRequeueSubject", WorkerRequeueSubject(tt.id), tt.requeue},
			} {
				if c.got != c.want {
					t.Errorf("%s(%q) = %q, want %q", c.name, tt.id, c.got, c.want)
				}
			}
			// A worker's offer, cancel, announce, heartbeat and progress
			// subjects are outside the durable job stream and distinct
			// from the shared worker subjects; its results and requeues
			// are in it.
			stream := strings.TrimSuffix(StreamSubjects, ">")
			for _, s := range []string{tt.offer, tt.cancel, tt.announce, tt.heartbeat, tt.progress} {
				if strings.HasPrefix(s, stream) {
					t.Errorf("%q falls inside the job stream %q", s, StreamSubjects)
				}
				if s == SubjectDiscover {
					t.Errorf("%q collides with a shared worker subject", s)
				}
			}
			for _, s := range []string{tt.result, tt.requeue} {
				if !strings.HasPrefix(s, stream) {
					t.Errorf("%q is not in the job stream %q", s, StreamSubjects)
				}
			}
			// Each report subject names its worker, and only its own.
			for _, s := range []string{tt.announce, tt.heartbeat, tt.progress, tt.result, tt.requeue} {
				if id, ok := ReportingWorker(s); !ok || id != tt.id {
					t.Errorf("ReportingWorker(%q) = %q, %v; want %q", s, id, ok, tt.id)
				}
			}
			// The subjects a worker receives on report nobody.
			for _, s := range []string{tt.offer, tt.cancel} {
				if id, ok := ReportingWorker(s); ok {
					t.Errorf("ReportingWorker(%q) = %q, want none", s, id)
				}
			}
		})
	}
}

func TestReportingWorker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject, id string
		ok          bool
	}{
		{"sluice.heartbeat.w1", "w1", true},
		{"sluice.progress.w-2_x", "w-2_x", true},
		{"sluice.worker.announce.w1", "w1", true},
		{"sluice.jobs.result.w1", "w1", true},
		{"sluice.jobs.requeue.w1", "w1", true},
		// The legacy and the reaper's subjects name no worker.
		{LegacySubjectResult, "", false},
		{SubjectRequeue, "", false},
		{"sluice.heartbeat", "", false},
		{"sluice.progress", "", false},
		{"sluice.worker.announce", "", false},
		// Nor does anything else, or a token that is not a worker id.
		{SubjectDue, "", false},
		{SubjectDiscover, "", false},
		{"sluice.worker.offer.w1", "", false},
		{"sluice.heartbeat.", "", false},
		{"sluice.heartbeat.*", "*", false},
		{"sluice.heartbeat.>", ">", false},
		{"sluice.heartbeat.w1.x", "w1.x", false},
		{"sluice.jobs.result.w1.w2", "w1.w2", false},
		{"sluice.heartbeat." + strings.Repeat("a", 65), strings.Repeat("a", 65), false},
		{"xsluice.heartbeat.w1", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			t.Parallel()
			id, ok := ReportingWorker(tt.subject)
			if ok != tt.ok || (ok && id != tt.id) {
				t.Errorf("ReportingWorker(%q) = %q, %v; want %q, %v", tt.subject, id, ok, tt.id, tt.ok)
			}
		})
	}
}

// FuzzReportingWorker checks that whatever worker ReportingWorker finds
// in a subject is a valid worker id whose own report subject is exactly
// that subject: a subject names one worker, and only through its own
// subjects.
func FuzzReportingWorker(f *testing.F) {
	for _, s := range []string{"sluice.heartbeat.w1", "sluice.jobs.result.w-1_x", "sluice.jobs.result", "sluice.jobs.requeue.",
		"sluice.worker.announce.a.b", "sluice.progress.*", "sluice.worker.offer.w1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		id, ok := ReportingWorker(subject)
		if !ok {
			return
		}
		if !ValidWorkerID(id) {
			t.Fatalf("ReportingWorker(%q) = %q, not a worker id", subject, id)
		}
		own := 0
		for _, s := range []string{HeartbeatSubject(id), ProgressSubject(id), AnnounceSubject(id), ResultSubject(id), WorkerRequeueSubject(id)} {
			if s == subject {
				own++
			}
		}
		if own != 1 {
			t.Fatalf("ReportingWorker(%q) = %q, but the subject is not one of that worker's report subjects", subject, id)
		}
	})
}

func TestConsumerSubjects(t *testing.T) {
	t.Parallel()
	prefix := strings.TrimSuffix(StreamSubjects, ">")
	seen := map[string]string{}
	for _, c := range []string{ConsumerDue, ConsumerResult, ConsumerRequeue} {
		subjects := ConsumerSubjects(c)
		if len(subjects) == 0 {
			t.Fatalf("consumer %s reads nothing", c)
		}
		for _, s := range subjects {
			if !strings.HasPrefix(s, prefix) {
				t.Errorf("%s reads %q, outside stream %s (%s)", c, s, StreamName, StreamSubjects)
			}
			if other, dup := seen[s]; dup {
				t.Errorf("%q is read by %s and %s: a work queue takes one consumer per subject", s, c, other)
			}
			seen[s] = c
		}
	}
	if ConsumerSubjects("other") != nil {
		t.Error("an unknown consumer reads something")
	}
	want := map[string][]string{
		ConsumerDue:     {SubjectDue},
		ConsumerResult:  {ResultSubjects, LegacySubjectResult},
		ConsumerRequeue: {WorkerRequeueSubjects, SubjectRequeue},
	}
	for c, w := range want {
		if got := ConsumerSubjects(c); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("ConsumerSubjects(%s) = %v, want %v", c, got, w)
		}
	}
}

func TestStreamSubjectsCoverJobSubjects(t *testing.T) {
	t.Parallel()
	prefix := strings.TrimSuffix(StreamSubjects, ">")
	for _, s := range []string{SubjectDue, SubjectRequeue, LegacySubjectResult, ResultSubject("w1"), WorkerRequeueSubject("w1")} {
		if !strings.HasPrefix(s, prefix) {
			t.Errorf("subject %q is not in stream %s (%s)", s, StreamName, StreamSubjects)
		}
	}
	for _, s := range []string{SubjectSubmit, HeartbeatSubject("w1"), ProgressSubject("w1"), AnnounceSubject("w1"), SubjectDiscover} {
		if strings.HasPrefix(s, prefix) {
			t.Errorf("core subject %q would be captured by stream %s", s, StreamName)
		}
	}
}

func TestAnnounceFree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		capacity, inFlight, want int
	}{
		{0, 0, -1},
		{0, 100, -1},
		{4, 0, 4},
		{4, 1, 3},
		{4, 4, 0},
		{4, 9, 0},
		{1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d", tt.capacity, tt.inFlight), func(t *testing.T) {
			t.Parallel()
			a := Announce{WorkerID: "w1", Capacity: tt.capacity, InFlight: tt.inFlight}
			if got := a.Free(); got != tt.want {
				t.Errorf("Announce{Capacity: %d, InFlight: %d}.Free() = %d, want %d", tt.capacity, tt.inFlight, got, tt.want)
			}
		})
	}
}

// sameValue compares messages without raw JSON fields.
func sameValue[T any](a, b T) bool { return reflect.DeepEqual(a, b) }
