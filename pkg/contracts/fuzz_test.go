package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzz targets for every decoder. Each checks, on every input, that the
// decoder does not panic and that whatever it accepts satisfies the
// message's documented invariants and survives json.Marshal and decoding
// again unchanged. The seeds run as ordinary tests in `go test`.

// checkRoundTrip re-encodes v, decodes it again and wants an equal value;
// the re-encoding must also be a fixed point.
func checkRoundTrip[T any](t testing.TB, v T, decode func([]byte) (T, error), same func(a, b T) bool) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("re-encode %+v: %v", v, err)
	}
	again, err := decode(data)
	if err != nil {
		t.Fatalf("decode of re-encoded %s: %v", data, err)
	}
	if !same(v, again) {
		t.Fatalf("round trip changed the value:\n  before %+v\n  json   %s\n  after  %+v", v, data, again)
	}
	data2, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("re-encode %+v: %v", again, err)
	}
	if !bytes.Equal(data, data2) {
		t.Fatalf("encoding is not stable:\n  %s\n  %s", data, data2)
	}
}

// sameJSON compares raw JSON by meaning: json.Marshal compacts and
// HTML-escapes a RawMessage, so its bytes may change while its value stays.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, erra := decodeAny(a)
	vb, errb := decodeAny(b)
	if erra != nil || errb != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func decodeAny(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func sameResult(a, b Result) bool {
	ra, rb := a.Result, b.Result
	a.Result, b.Result = nil, nil
	return reflect.DeepEqual(a, b) && sameJSON(ra, rb)
}

func sameOffer(a, b Offer) bool {
	pa, pb := a.Job.Payload, b.Job.Payload
	a.Job.Payload, b.Job.Payload = nil, nil
	return reflect.DeepEqual(a, b) && sameJSON(pa, pb)
}

// sameAck treats an empty list like a missing one: both are omitted.
func sameAck(a, b HeartbeatAck) bool {
	return sameLeases(a.Lost, b.Lost) && sameLeases(a.Cancel, b.Cancel) && a.Error == b.Error
}

func sameLeases(a, b []Lease) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func sameSubmit(a, b SubmitRequest) bool {
	pa, pb, ia, ib := a.Payload, b.Payload, a.Items, b.Items
	a.Payload, b.Payload, a.Items, b.Items = nil, nil, nil, nil
	return reflect.DeepEqual(a, b) && sameJSON(pa, pb) && sameJSON(ia, ib)
}

// acceptedIsOneValue is the property every decoder shares: what it accepts
// is exactly one JSON value, nothing after it.
func acceptedIsOneValue(t *testing.T, data []byte) {
	t.Helper()
	if !json.Valid(data) {
		t.Fatalf("accepted %q, which is not exactly one JSON value", data)
	}
}

func validRaw(t *testing.T, field string, raw json.RawMessage) {
	t.Helper()
	if len(raw) > 0 && !json.Valid(raw) {
		t.Fatalf("%s %q is not valid JSON", field, raw)
	}
}

func checkLeaseInvariant(t *testing.T, l Lease) {
	t.Helper()
	if !ValidJobID(l.JobID) || l.Claim < 1 {
		t.Fatalf("accepted lease %+v", l)
	}
}

// addSeeds adds the inputs every decoder must cope with, then the target's own.
func addSeeds(f *testing.F, seeds ...string) {
	common := []string{
		``, ` `, `null`, `{}`, `[]`, `"x"`, `0`, `true`, `{`, `}`, `{}}`, `{}]`, `{} {}`, `{},`, `{}x`,
		`{"nope":1}`, "\xff", `{"job_id":"\ud800"}`, `{"job_id":"a"}]`, `{"job_id":"a"}}`,
	}
	for _, s := range append(common, seeds...) {
		f.Add([]byte(s))
	}
}

func FuzzDecodeDue(f *testing.F) {
	addSeeds(f,
		`{"job_id":"01HZX3K5ABCD"}`, `{"job_id":"`+strings.Repeat("j", 64)+`"}`, `{"job_id":"`+strings.Repeat("j", 65)+`"}`,
		`{"job_id":""}`, `{"job_id":"a.b"}`, `{"job_id":"a b"}`, `{"JOB_ID":"a"}`, `{"job_id":"a","job_id":"b"}`,
		`{"job_id":12}`, `{"job_id":"a","attempt":1}`, ` {"job_id":"a"} `,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeDue(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if !ValidJobID(m.JobID) {
			t.Fatalf("accepted job_id %q", m.JobID)
		}
		checkRoundTrip(t, m, DecodeDue, sameValue[Due])
	})
}

func FuzzDecodeRequeue(f *testing.F) {
	addSeeds(f,
		`{"job_id":"j1","attempt":2,"state":"running","reason":"stale"}`,
		`{"job_id":"j1","attempt":0,"state":"pending","reason":"lost"}`,
		`{"job_id":"j1","attempt":1,"state":"running","reason":"timeout"}`,
		`{"job_id":"j1","attempt":1,"state":"running","reason":"shutdown"}`,
		`{"job_id":"j1","attempt":-1,"state":"pending","reason":"lost"}`,
		`{"job_id":"j1","attempt":1,"state":"succeeded","reason":"lost"}`,
		`{"job_id":"j1","attempt":1,"state":"running","reason":"bored"}`,
		`{"job_id":"j1","attempt":1.5,"state":"running","reason":"stale"}`,
		`{"job_id":"j1","claim":2,"state":"running","reason":"stale"}`,
		`{"job_id":"j1","attempt":2,"claim":2,"state":"running","reason":"stale"}`,
		`{"job_id":"j1","attempt":2,"claim":3,"state":"running","reason":"stale"}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeRequeue(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if !ValidJobID(m.JobID) || m.Claim < 0 {
			t.Fatalf("accepted job_id %q claim %d", m.JobID, m.Claim)
		}
		if !m.State.Active() {
			t.Fatalf("accepted state %q", m.State)
		}
		switch m.Reason {
		case ReasonStale, ReasonLost, ReasonTimeout, ReasonShutdown:
		default:
			t.Fatalf("accepted reason %q", m.Reason)
		}
		checkRoundTrip(t, m, DecodeRequeue, sameValue[Requeue])
	})
}

func FuzzDecodeResult(f *testing.F) {
	addSeeds(f,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":{"n": [1, 2]}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":"<b>&\u2028"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":null}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":1e400}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":"\xff"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"handler: boom"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"cancelled","error":"cancelled: by user"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"boom"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"running"}`,
		`{"job_id":"j1","attempt":0,"worker_id":"w1","state":"succeeded"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w.1","state":"succeeded"}`,
		`{"job_id":"j1","claim":4,"worker_id":"w1","state":"succeeded"}`,
		`{"job_id":"j1","attempt":4,"claim":4,"worker_id":"w1","state":"succeeded"}`,
		`{"job_id":"j1","attempt":4,"claim":5,"worker_id":"w1","state":"succeeded"}`,
		`{"job_id":"j1","claim":0,"worker_id":"w1","state":"succeeded"}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"failed","error":"resources: memory","usage":{"mechanism":"cgroup-v1","peak_memory":67108864,"cpu_seconds":0.5}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","usage":{"mechanism":"none","peak_memory":-1,"cpu_seconds":1e400}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeResult(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		checkLeaseInvariant(t, Lease{JobID: m.JobID, Claim: m.Claim})
		if !ValidWorkerID(m.WorkerID) {
			t.Fatalf("accepted worker_id %q", m.WorkerID)
		}
		if !m.State.Final() {
			t.Fatalf("accepted state %q, which is not final", m.State)
		}
		if m.State != StateSucceeded && ClassOf(m.Error) == "" {
			t.Fatalf("accepted %s result with unclassed error %q", m.State, m.Error)
		}
		validRaw(t, "result", m.Result)
		checkRoundTrip(t, m, DecodeResult, sameResult)
	})
}

func FuzzDecodeResults(f *testing.F) {
	addSeeds(f,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded"}`,
		`{"results":[{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":{"n":1}},{"job_id":"j2","attempt":2,"worker_id":"w1","state":"failed","error":"handler: x"}]}`,
		`{"results":[]}`,
		`{"results":null}`,
		`{"results":[{"job_id":"j1","attempt":1,"worker_id":"w1","state":"running"}]}`,
		`{"results":[{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded"}],"x":1}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeResults(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if len(rs) == 0 || len(rs) > MaxResultsPerBatch {
			t.Fatalf("accepted %d results", len(rs))
		}
		for _, m := range rs {
			if err := checkResult(m); err != nil {
				t.Fatalf("accepted a result that does not check: %v", err)
			}
			validRaw(t, "result", m.Result)
		}
	})
}

func FuzzDecodeOffers(f *testing.F) {
	addSeeds(f,
		`{"job":{"id":"j1","kind":"a","attempt":1}}`,
		`{"jobs":[{"id":"j1","kind":"a","attempt":1},{"id":"j2","kind":"b","attempt":3,"payload":[1]}]}`,
		`{"jobs":[]}`,
		`{"jobs":[{"id":"j1","kind":"a","attempt":0}]}`,
		`{"jobs":[{"id":"j1","kind":"a","claim":1},{"id":"j2","kind":"b","attempt":3,"claim":3}]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, _, err := DecodeOffers(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if len(specs) == 0 || len(specs) > MaxOfferBatch {
			t.Fatalf("accepted %d jobs", len(specs))
		}
		for _, s := range specs {
			if err := checkSpec(s); err != nil {
				t.Fatalf("accepted a job that does not check: %v", err)
			}
			validRaw(t, "payload", s.Payload)
		}
	})
}

func FuzzDecodeOffer(f *testing.F) {
	addSeeds(f,
		`{"job":{"id":"j1","tenant":"acme","kind":"email.send","attempt":2,"payload":{"to":"a@b"},"key":"k","priority":5}}`,
		`{"job":{"id":"j1","kind":"a","attempt":1,"payload":[1, 2,  3]}}`,
		`{"job":{"id":"j1","kind":"a","attempt":1,"payload":"<>&"}}`,
		`{"job":{"id":"j1","kind":"a","attempt":0}}`,
		`{"job":{"id":"j1","kind":"A","attempt":1}}`,
		`{"job":{"id":"j1","kind":"a","attempt":1,"state":"x"}}`,
		`{"job":{"id":"j1","kind":"a","claim":2}}`,
		`{"job":{"id":"j1","kind":"a","claim":2,"attempt":1}}`,
		`{"job":{"id":"j1","kind":"a","attempt":1,"resources":{"cpu":0.5,"memory":"512MiB"}}}`,
		`{"job":{"id":"j1","kind":"a","attempt":1,"resources":{"cpu":-1,"memory":1048576}}}`,
		`{"job":null}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeOffer(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		checkLeaseInvariant(t, Lease{JobID: m.Job.ID, Claim: m.Job.Claim})
		if !ValidKind(m.Job.Kind) {
			t.Fatalf("accepted kind %q", m.Job.Kind)
		}
		validRaw(t, "payload", m.Job.Payload)
		checkRoundTrip(t, m, DecodeOffer, sameOffer)
	})
}

func FuzzDecodeOfferReply(f *testing.F) {
	addSeeds(f,
		`{"status":"accepted","worker_id":"w1","in_flight":3,"capacity":4}`,
		`{"status":"busy","worker_id":"w1","in_flight":4,"capacity":4}`,
		`{"status":"refused","worker_id":"w1","reason":"draining"}`,
		`{"status":"ok"}`,
		`{"status":"busy","in_flight":-1}`,
		`{"status":"busy","capacity":-1}`,
		`{"status":"accepted","worker_id":"w1","results":[{"job_id":"j1","attempt":2,"status":"accepted"},{"job_id":"j2","claim":3,"status":"busy"}]}`,
		`{"status":"busy","worker_id":"w1","results":[{"job_id":"j1","attempt":2,"claim":3,"status":"busy"}]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeOfferReply(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		switch m.Status {
		case OfferAccepted, OfferBusy, OfferRefused:
		default:
			t.Fatalf("accepted status %q", m.Status)
		}
		if m.InFlight < 0 || m.Capacity < 0 {
			t.Fatalf("accepted in_flight %d capacity %d", m.InFlight, m.Capacity)
		}
		checkRoundTrip(t, m, DecodeOfferReply, sameValue[OfferReply])
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	addSeeds(f,
		`{"worker_id":"w1"}`,
		`{"worker_id":"w1","leases":null}`,
		`{"worker_id":"w1","leases":[]}`,
		`{"worker_id":"w1","leases":[{"job_id":"j1","attempt":1},{"job_id":"j2","attempt":9}]}`,
		`{"worker_id":"w1","leases":[{"job_id":"j1","attempt":0}]}`,
		`{"worker_id":"w1","leases":[{"job_id":"","attempt":1}]}`,
		`{"worker_id":"w1","leases":[{"job_id":"j1","claim":1},{"job_id":"j2","attempt":9}]}`,
		`{"worker_id":"w1","leases":[{"job_id":"j1","claim":2,"attempt":1}]}`,
		`{"worker_id":"w 1"}`,
		`{"leases":[]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeHeartbeat(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if !ValidWorkerID(m.WorkerID) {
			t.Fatalf("accepted worker_id %q", m.WorkerID)
		}
		if len(m.Leases) > MaxLeasesPerHeartbeat {
			t.Fatalf("accepted %d leases", len(m.Leases))
		}
		for _, l := range m.Leases {
			checkLeaseInvariant(t, l)
		}
		checkRoundTrip(t, m, DecodeHeartbeat, sameValue[Heartbeat])
	})
}

func FuzzDecodeHeartbeatAck(f *testing.F) {
	addSeeds(f,
		`{"lost":[{"job_id":"j1","attempt":1}],"cancel":[{"job_id":"j2","attempt":2}]}`,
		`{"lost":[{"job_id":"j1","claim":1}],"cancel":[{"job_id":"j2","claim":2,"attempt":2}]}`,
		`{"lost":[],"cancel":null}`,
		`{"error":"heartbeat: bad <id>"}`,
		`{"error":"\xff\u0000"}`,
		`{"lost":{}}`,
		`{"cancel":[{"job_id":"j1","attempt":1,"x":1}]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeHeartbeatAck(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		checkRoundTrip(t, m, DecodeHeartbeatAck, sameAck)
	})
}

func FuzzDecodeAnnounce(f *testing.F) {
	addSeeds(f,
		`{"worker_id":"w1","kinds":["email","img.resize"],"capacity":8,"in_flight":3,"draining":true,"interval_ms":2000}`,
		`{"worker_id":"w1","kinds":[],"leaving":true}`,
		`{"worker_id":"w1","capacity":1,"in_flight":5}`,
		`{"worker_id":"w1","capacity":-1}`,
		`{"worker_id":"w1","interval_ms":-1}`,
		`{"worker_id":"w1","kinds":["Not OK"]}`,
		`{"worker_id":"w>"}`,
		`{"worker_id":"w1","capacity":2,"resources":{"cpu":2,"memory":"1GiB"},"free_resources":{"cpu":1.5,"memory":"1536MiB"},"seq":9}`,
		`{"worker_id":"w1","free_resources":{"memory":"-1"}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeAnnounce(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if !ValidWorkerID(m.WorkerID) {
			t.Fatalf("accepted worker_id %q", m.WorkerID)
		}
		if m.Capacity < 0 || m.InFlight < 0 || m.IntervalMS < 0 {
			t.Fatalf("accepted negative figures %+v", m)
		}
		for _, k := range m.Kinds {
			if !ValidKind(k) {
				t.Fatalf("accepted kind %q", k)
			}
		}
		free := m.Free()
		if (free == -1) != (m.Capacity == 0) || free < -1 || free > m.Capacity {
			t.Fatalf("Free() = %d for capacity %d in_flight %d", free, m.Capacity, m.InFlight)
		}
		checkRoundTrip(t, m, DecodeAnnounce, sameValue[Announce])
	})
}

func FuzzDecodeCancelJob(f *testing.F) {
	addSeeds(f,
		`{"job_id":"j1","attempt":1}`,
		`{"job_id":"j1","attempt":9223372036854775807}`,
		`{"job_id":"j1","attempt":9223372036854775808}`,
		`{"job_id":"j1","attempt":0}`,
		`{"job_id":"j1!","attempt":1}`,
		`{"attempt":1}`,
		`{"job_id":"j1","claim":4}`,
		`{"job_id":"j1","claim":4,"attempt":4}`,
		`{"job_id":"j1","claim":4,"attempt":3}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeCancelJob(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		checkLeaseInvariant(t, Lease{JobID: m.JobID, Claim: m.Claim})
		checkRoundTrip(t, m, DecodeCancelJob, sameValue[CancelJob])
	})
}

func FuzzDecodeSubmit(f *testing.F) {
	addSeeds(f,
		`{"kind":"email"}`,
		`{"kind":"email","payload":{"to": ["a@b"]},"key":"k 1","priority":9,"deadline":"90s","max_attempts":100}`,
		`{"kind":"email","deadline":"2030-01-02T03:34:05Z"}`,
		`{"kind":"email","deadline":"2030-01-02T03:04:05Z"}`,
		`{"kind":"email","deadline":"2999-01-01T00:00:00Z"}`,
		`{"kind":"email","deadline":"-1s"}`,
		`{"kind":"email","deadline":"876001h"}`,
		`{"kind":"email","deadline":"tomorrow"}`,
		`{"kind":"email","key":"a\u0000b"}`,
		`{"kind":"email","key":"\ufffd"}`,
		`{"kind":"email","priority":10}`,
		`{"kind":"email","max_attempts":101}`,
		`{"kind":"email","items":[1],"concurrency":2}`,
		`{"kind":"email","items":[12345678901234567890, -0, 123456789012345678901234567890123456789, 1.5e300, 1e400],"concurrency":2}`,
		`{"kind":"email","items":[ {"a" : 1e-7, "b":"\u00e9<&"} , [[1,[2.50]],[]], "\ud800", "`+"\xff"+`"]}`,
		`{"kind":"email","payload":{"n": 12345678901234567890, "z": -0.0e-0, "s": "`+"\xe2\x80\xa8\xed\xa0\x80"+`"}}`,
		`{"kind":"Email"}`,
		`{"kind":"email","payload":null}`,
		` {"kind":"email"} `,
		`[{"kind":"email"}]`,
		`{"kind":"a","priority":"9","inputs":[{"name":1,"zz":[{}]}]}`,
		`{"kind":"sleep","payload":{"ms":-1}}`,
		`{"kind":"exec","payload":{"argv":["echo",{"x":1}],"env":{"A":"b"}}}`,
		`{"kind":"sleep","items":[{"ms":1},{"ms":"2"}]}`,
		`{"kind":"exec","payload":{"argv":["a"],"argv":["b"]}}`,
		`{"kind":"exec","payload":{"argv":["a"],"ARGV":["b"]}}`,
		`{"kind":"x","Kind":"y"}`,
	)
	limits := []Limits{testLimits, {}, {MaxDispatchDeadline: time.Minute, DefaultMaxAttempts: 7}}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeSubmit(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		acceptedIsOneValue(t, data)
		if !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
			t.Fatalf("accepted %q, which is not an object", data)
		}
		if path, dup := firstDuplicateByTokens(data); dup {
			t.Fatalf("accepted %q, which names %s twice", data, path)
		}
		checkRoundTrip(t, r, DecodeSubmit, sameSubmit)
		for _, lim := range limits {
			checkValidate(t, r, lim)
		}
	})
}

// checkDecodeError wants a decode error to be a *DecodeError in API terms.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("decode error %v is a %T, want *DecodeError", err, err)
	}
	for _, goTerm := range []string{"Go struct", "Go value", "unmarshal", "json:", "SubmitRequest", "of type"} {
		if strings.Contains(err.Error(), goTerm) {
			t.Fatalf("decode error %q speaks of Go (%q)", err, goTerm)
		}
	}
}

// checkValidate wants Validate to fail with a *FieldError (or a
// *DecodeError of a duplicate key) or to return a submission within every
// bound.
func checkValidate(t *testing.T, r SubmitRequest, lim Limits) {
	t.Helper()
	s, err := r.Validate(testNow, lim)
	if err != nil {
		var fe *FieldError
		if !errors.As(err, &fe) && !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("Validate error %v is a %T, want *FieldError", err, err)
		}
		return
	}
	if !ValidKind(s.Kind) || s.Kind != r.Kind {
		t.Fatalf("accepted kind %q", s.Kind)
	}
	if len(s.Key) > MaxKeyLen || s.Key != r.Key {
		t.Fatalf("accepted key %q", s.Key)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		t.Fatalf("accepted priority %d", s.Priority)
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxMaxAttempts {
		t.Fatalf("accepted max_attempts %d", s.MaxAttempts)
	}
	if len(r.Items) == 0 && (s.Concurrency != 0 || s.FailFast || len(s.Items) > 0) {
		t.Fatalf("accepted a window without items: %d", s.Concurrency)
	}
	if len(r.Items) > 0 {
		if len(s.Items) < 1 || len(s.Items) > MaxItems || s.Concurrency < 1 || s.Concurrency > MaxWindow || len(s.Payload) > 0 {
			t.Fatalf("accepted fan-out of %d items, window %d", len(s.Items), s.Concurrency)
		}
		var sent []json.RawMessage
		if err := json.Unmarshal(r.Items, &sent); err != nil || len(sent) != len(s.Items) {
			t.Fatalf("accepted %d items of %q (%v)", len(s.Items), r.Items, err)
		}
		for i, it := range s.Items {
			checkKept(t, fmt.Sprintf("items[%d]", i), sent[i], it)
		}
	}
	if len(r.Payload) > 0 {
		checkKept(t, "payload", r.Payload, s.Payload)
	}
	maxWait := lim.MaxDispatchDeadline
	if maxWait <= 0 {
		maxWait = 100 * 365 * 24 * time.Hour
	}
	if !s.DispatchDeadline.After(testNow) || s.DispatchDeadline.After(testNow.Add(maxWait)) {
		t.Fatalf("dispatch deadline %v outside (%v, %v]", s.DispatchDeadline, testNow, testNow.Add(maxWait))
	}
}

// checkKept wants a payload or item kept as submitted: valid UTF-8 JSON,
// compact, and token for token the text sent (json.Compact does nothing
// but drop whitespace), so no number or string changed.
func checkKept(t *testing.T, field string, sent, kept json.RawMessage) {
	t.Helper()
	if !json.Valid(kept) || !utf8.Valid(kept) {
		t.Fatalf("%s: kept %q, which is not UTF-8 JSON", field, kept)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, sent); err != nil {
		t.Fatalf("%s: accepted %q: %v", field, sent, err)
	}
	if !bytes.Equal(want.Bytes(), kept) {
		t.Fatalf("%s: sent %q, kept %q", field, sent, kept)
	}
}

func FuzzDecodeProgressReport(f *testing.F) {
	addSeeds(f,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":42.5,"stage":"upload","message":"3 of 7"}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":0}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":100.0001}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":-1}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":1e400}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":50,"stage":"`+strings.Repeat("s", 65)+`"}}`,
		`{"job_id":"j1","attempt":0,"worker_id":"w1","progress":{"percent":5}}`,
		`{"job_id":"j1","attempt":1,"worker_id":"w 1","progress":{"percent":5}}`,
		`{"job_id":"j1","claim":3,"worker_id":"w1","progress":{"percent":5}}`,
		`{"job_id":"j1","claim":3,"attempt":2,"worker_id":"w1","progress":{"percent":5}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeProgressReport(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		checkLeaseInvariant(t, Lease{JobID: m.JobID, Claim: m.Claim})
		if !ValidWorkerID(m.WorkerID) || m.Progress.Check() != nil {
			t.Fatalf("accepted %+v", m)
		}
		checkRoundTrip(t, m, DecodeProgressReport, sameValue[ProgressReport])
	})
}

func FuzzDecodeEvent(f *testing.F) {
	addSeeds(f,
		`{"type":"state","job_id":"j1","tenant":"acme","kind":"sleep","state":"running","attempt":1,"worker":"w1","at":"2026-11-23T10:00:00Z"}`,
		`{"type":"state","job_id":"j1","tenant":"a.b","state":"failed","attempt":3,"error":"stale: lost 3 times","at":"2026-11-23T10:00:00.123456789+02:00"}`,
		`{"type":"progress","job_id":"j1","tenant":"acme","attempt":1,"progress":{"percent":10,"stage":"copy"},"at":"2026-11-23T10:00:00Z"}`,
		`{"type":"progress","job_id":"j1","tenant":"acme","attempt":1,"at":"2026-11-23T10:00:00Z"}`,
		`{"type":"state","job_id":"j1","state":"bored","attempt":1,"at":"2026-11-23T10:00:00Z"}`,
		`{"type":"snapshot","job_id":"j1","at":"2026-11-23T10:00:00Z"}`,
		`{"type":"state","job_id":"j1","state":"pending","at":"yesterday"}`,
		`{"type":"state","job_id":"j1","tenant":"acme","state":"running","attempt":2,"claim":5,"worker":"w1","at":"2026-11-23T10:00:00Z"}`,
		`{"type":"progress","job_id":"j1","tenant":"acme","attempt":1,"claim":1,"progress":{"percent":10},"at":"2026-11-23T10:00:00Z"}`,
		`{"type":"state","job_id":"j1","state":"running","claim":-1,"at":"2026-11-23T10:00:00Z"}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeEvent(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if !ValidJobID(m.JobID) {
			t.Fatalf("accepted job_id %q", m.JobID)
		}
		switch m.Type {
		case EventState:
			if !m.State.Valid() {
				t.Fatalf("accepted state %q", m.State)
			}
		case EventProgress:
			if m.Progress == nil || m.Progress.Check() != nil {
				t.Fatalf("accepted progress %+v", m.Progress)
			}
		default:
			t.Fatalf("accepted type %q", m.Type)
		}
		checkRoundTrip(t, m, DecodeEvent, sameEvent)
	})
}

// sameEvent compares instants, not time.Location pointers.
func sameEvent(a, b Event) bool {
	ta, tb := a.At, b.At
	a.At, b.At = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b) && ta.Equal(tb)
}

func FuzzDecodeBatch(f *testing.F) {
	for _, s := range []string{`{"jobs":[{"kind":"sleep"}]}`, `{"jobs":[]}`, `{"jobs":null}`, `{}`, `[`, `{"jobs":[1,"x",{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeBatch(data)
		var fe *FieldError
		if err != nil && !errors.As(err, &fe) {
			checkDecodeError(t, err)
		}
		if err == nil && (len(r.Jobs) == 0 || len(r.Jobs) > MaxBatchJobs) {
			t.Fatalf("accepted %d jobs", len(r.Jobs))
		}
	})
}

func FuzzDecodeRateUsage(f *testing.F) {
	addSeeds(f,
		`{"gateway":"g1","used":{"tenant_rate":{"acme":3},"ip_rate":{"203.0.113.1":1}}}`,
		`{"gateway":"g1","used":{}}`, `{"gateway":"g1"}`, `{"gateway":"","used":{}}`,
		`{"gateway":"g1","used":{"other":{"a":1}}}`, `{"gateway":"g1","used":{"ip_rate":{"a":0}}}`,
		`{"gateway":"g1","used":{"ip_rate":{"":1}}}`, `{"gateway":"g1","used":{"ip_rate":{"a":-4}}}`,
		`{"gateway":"g1","used":{"ip_rate":{"`+strings.Repeat("k", 129)+`":1}}}`, `[]`, `null`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := DecodeRateUsage(data)
		if err != nil {
			return
		}
		acceptedIsOneValue(t, data)
		if u.Gateway == "" {
			t.Fatal("accepted a usage with no gateway")
		}
		n := 0
		for limit, keys := range u.Used {
			if limit != LimitTenantRate && limit != LimitIPRate {
				t.Fatalf("accepted limit %q", limit)
			}
			for k, c := range keys {
				n++
				if k == "" || len(k) > 128 || c < 1 {
					t.Fatalf("accepted %s %q: %d", limit, k, c)
				}
			}
		}
		if n > MaxRateUsageKeys {
			t.Fatalf("accepted %d keys", n)
		}
		checkRoundTrip(t, u, DecodeRateUsage, sameValue[RateUsage])
	})
}

// The validators are byte loops; these regular expressions are what they
// must agree with.
var (
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	kindPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
)

func FuzzValidators(f *testing.F) {
	for _, s := range []string{"", "a", "A", "-", "_", ".", "a.b", "A.b", "sw-00001", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"é", "a b", "a\n", "0x", ".a", "a/b", "a*", "a>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidWorkerID(s), tokenPattern.MatchString(s); got != want {
			t.Fatalf("ValidWorkerID(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidJobID(s), tokenPattern.MatchString(s); got != want {
			t.Fatalf("ValidJobID(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidKind(s), kindPattern.MatchString(s); got != want {
			t.Fatalf("ValidKind(%q) = %v, want %v", s, got, want)
		}
	})
}
