package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The encoders of the wire written by hand (the offer a dispatcher sends,
// the split of a load report the roster caches by) and the one-pass
// decoding of the claim under either wire name.

// offerSpecs are offered jobs as the dispatcher encodes them, plain and
// with every optional field.
func offerSpecs() []JobSpec {
	return []JobSpec{
		{ID: "j1", Tenant: "acme", Kind: "sleep", Claim: 1},
		{ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Tenant: "acme", Kind: "img.resize", Claim: 1 << 40,
			Payload: json.RawMessage(`{"s":"<a & b>","n":[1,2]}`), Key: "k-1", Priority: -3,
			RunLimits: RunLimits{StallTimeout: Duration(30 * time.Second), MaxRuntime: Duration(time.Hour)},
			Inputs:    []InputRef{{Name: "model", URI: "file:///m.bin", SHA256: strings.Repeat("ab", 32), Version: "v2"}}},
		{ID: "j3", Kind: "sleep", Claim: 7, Payload: json.RawMessage(`"\u2028 é"`)},
	}
}

// encodeSpecs encodes specs one by one as the dispatcher does.
func encodeSpecs(t testing.TB, specs []JobSpec) [][]byte {
	out := make([][]byte, len(specs))
	for i, s := range specs {
		b, err := EncodeJSON(s)
		require.NoError(t, err)
		out[i] = b
	}
	return out
}

// requireOfferDecodes checks that AppendOffer of specs decodes strictly to
// specs: an Offer for one, an OfferBatch for several, and that DecodeOffers
// reads it the same.
func requireOfferDecodes(t *testing.T, specs []JobSpec) {
	t.Helper()
	prefix := []byte("kept")
	body := AppendOffer(bytes.Clone(prefix), encodeSpecs(t, specs))
	require.True(t, bytes.HasPrefix(body, prefix), "appended to dst")
	body = body[len(prefix):]
	if len(specs) == 1 {
		var m Offer
		require.NoError(t, decodeStrict(body, &m), "%s", body)
		require.Equal(t, specs[0], m.Job, "%s", body)
	} else {
		var m OfferBatch
		require.NoError(t, decodeStrict(body, &m), "%s", body)
		require.Equal(t, specs, m.Jobs, "%s", body)
	}
	got, batch, err := DecodeOffers(body)
	require.NoError(t, err, "%s", body)
	require.Equal(t, len(specs) > 1, batch)
	require.Equal(t, specs, got)
}

func TestAppendOfferRoundTrip(t *testing.T) {
	t.Parallel()
	specs := offerSpecs()
	for name, tc := range map[string][]JobSpec{
		"one plain":         specs[:1],
		"one with all":      specs[1:2],
		"several":           specs,
		"several the same":  {specs[0], specs[0], specs[0]},
		"two, payload last": specs[1:],
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireOfferDecodes(t, tc)
		})
	}
}

// FuzzAppendOffer: an offer of any jobs a dispatcher can encode decodes
// strictly to the same jobs.
func FuzzAppendOffer(f *testing.F) {
	f.Add("j1", "acme", "sleep", int64(1), []byte(`{"ms":5}`), "", 0, int64(0), uint8(1))
	f.Add("j-2_x", "", "img.resize", int64(1<<62), []byte(`"<&>"`), "key", -5, int64(1500), uint8(3))
	f.Add("j3", "t", "k", int64(9), []byte(` [1, 2 ]`), "\u2028", 7, int64(1), uint8(2))
	f.Fuzz(func(t *testing.T, id, tenant, kind string, claim int64, payload []byte, key string, prio int, limitMS int64, n uint8) {
		s := JobSpec{ID: id, Tenant: tenant, Kind: kind, Claim: claim, Key: key, Priority: prio}
		// What a job holds: a payload that is JSON, compacted as every
		// encoder writes it; strings as JSON carries them (valid UTF-8).
		var c bytes.Buffer
		if json.Compact(&c, payload) == nil && c.Len() > 0 {
			s.Payload = json.RawMessage(c.Bytes())
		}
		for _, str := range []*string{&s.ID, &s.Tenant, &s.Kind, &s.Key} {
			*str = strings.ToValidUTF8(*str, "?")
		}
		if limitMS > 0 && limitMS < int64(MaxRunLimit/time.Millisecond) {
			s.MaxRuntime = Duration(time.Duration(limitMS) * time.Millisecond)
		}
		specs := make([]JobSpec, 1+int(n%4))
		for i := range specs {
			specs[i] = s
		}
		body := AppendOffer(nil, encodeSpecs(t, specs))
		if len(specs) == 1 {
			var m Offer
			if err := decodeStrict(body, &m); err != nil || !sameValue(m.Job, s) {
				t.Fatalf("%s: decoded %+v, %v; want %+v", body, m.Job, err, s)
			}
			return
		}
		var m OfferBatch
		if err := decodeStrict(body, &m); err != nil || !sameValue(m.Jobs, specs) {
			t.Fatalf("%s: decoded %+v, %v; want %+v", body, m.Jobs, err, specs)
		}
	})
}

// splitCases are announcements in and around the form SplitAnnounce
// splits (a trailing seq as the encoder writes it), valid and not: the
// seq it finds, or -1 when it leaves b whole.
var splitCases = []struct {
	b   string
	seq int64
}{
	{`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":42}`, 42},
	{`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000}`, -1},
	{`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":0}`, 0},
	{`{"worker_id":"w1","seq":18446744073709551615}`, -2}, // max uint64, checked below
	{`{"worker_id":"w1","seq":042}`, -1},
	{`{"worker_id":"w1","seq":-1}`, -1},
	{`{"worker_id":"w1","seq":18446744073709551616}`, -1},
	{`{"worker_id":"w1","seq":1.5}`, -1},
	{`{"worker_id":"w1","seq":1e3}`, -1},
	{`{"worker_id":"w1","seq":+9}`, -1},
	{`{"worker_id":"w1","seq":1_000}`, -1},
	{`{"worker_id":"w1","seq":}`, -1},
	{`{"worker_id":"w1","seq": 5}`, -1},
	{`{"worker_id":"w1","seq":5 }`, -1},
	{`{"worker_id":"w1","seq":5} `, -1},
	{`{"worker_id":"w1","seq":7,"seq":8}`, -1},
	{`{"worker_id":"w1","Seq":7,"seq":8}`, -1},
	{`{"worker_id":"w1","seq":"x","seq":8}`, -1},
	{`{"worker_id":"w1","seq":7,"kinds":["k"]}`, -1},
	{`{"worker_id":"w1",,"seq":9}`, 9},
	{`{,"seq":9}`, -1},
	{"{ \t,\"seq\":9}", -1},
	{`{"version":"a,\"seq\":5}`, -1},
	{`,"seq":9}`, -1},
	{`{"worker_id":"w1","capacity":-2,"seq":9}`, 9},
	{``, -1},
}

// requireSplitAgrees checks that SplitAnnounce's rest of b decodes as b
// does but for Seq, which it gives.
func requireSplitAgrees(t testing.TB, b []byte) (uint64, bool) {
	full, ferr := DecodeAnnounce(b)
	rest, seq, ok := SplitAnnounce(nil, b)
	if !ok {
		if rest != nil {
			t.Fatalf("%s: rest %q without a split", b, rest)
		}
		return 0, false
	}
	part, perr := DecodeAnnounce(rest)
	if (ferr == nil) != (perr == nil) {
		t.Fatalf("%s: decodes with %v, its rest %s with %v", b, ferr, rest, perr)
	}
	if ferr != nil {
		return seq, true
	}
	part.Seq = seq
	if !sameValue(full, part) {
		t.Fatalf("%s: decodes to %+v, its rest %s and seq %d to %+v", b, full, rest, seq, part)
	}
	return seq, true
}

func TestSplitAnnounce(t *testing.T) {
	t.Parallel()
	for _, tc := range splitCases {
		seq, ok := requireSplitAgrees(t, []byte(tc.b))
		switch tc.seq {
		case -1:
			require.False(t, ok, tc.b)
		case -2:
			require.True(t, ok, tc.b)
			require.Equal(t, uint64(1<<64-1), seq, tc.b)
		default:
			require.True(t, ok, tc.b)
			require.Equal(t, uint64(tc.seq), seq, tc.b)
		}
	}

	// What workers send: their announcements as json.Marshal writes them.
	for _, a := range []Announce{
		{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 4, InFlight: 3, IntervalMS: 1000, Seq: 1_800_000_000_000_000_001},
		{WorkerID: "w1", Draining: true, Leaving: true, Spawned: true, Version: "0.13.0", Seq: 1},
	} {
		b, err := json.Marshal(a)
		require.NoError(t, err)
		rest, seq, ok := SplitAnnounce([]byte("scratch")[:0], b)
		require.True(t, ok, "%s", b)
		require.Equal(t, a.Seq, seq)
		back, err := DecodeAnnounce(rest)
		require.NoError(t, err)
		back.Seq = seq
		require.Equal(t, a, back)
	}
}

// FuzzSplitAnnounce: whatever SplitAnnounce splits, its rest decodes as
// the whole does but for the seq it gives.
func FuzzSplitAnnounce(f *testing.F) {
	for _, tc := range splitCases {
		f.Add([]byte(tc.b))
	}
	f.Fuzz(func(t *testing.T, b []byte) { requireSplitAgrees(t, b) })
}

// A claim given twice in disagreement is refused with the path of the
// message that gives it, as every other decode error of these messages.
func TestMessageClaimDisagreementNamesItsPath(t *testing.T) {
	t.Parallel()
	const both = `"attempt":7,"claim":8`
	for _, tc := range []struct {
		body   string
		decode func([]byte) error
		path   string
	}{
		{`{"job_id":"j1",` + both + `,"worker_id":"w1","state":"succeeded"}`,
			func(b []byte) error { _, err := DecodeResult(b); return err }, ""},
		{`{"results":[{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded"},{"job_id":"j2",` + both + `,"worker_id":"w1","state":"succeeded"}]}`,
			func(b []byte) error { _, err := DecodeResults(b); return err }, "results[1]"},
		{`{"job":{"id":"j1","kind":"sleep",` + both + `}}`,
			func(b []byte) error { _, err := DecodeOffer(b); return err }, "job"},
		{`{"jobs":[{"id":"j1","kind":"sleep","attempt":1},{"id":"j2","kind":"sleep",` + both + `}]}`,
			func(b []byte) error { _, _, err := DecodeOffers(b); return err }, "jobs[1]"},
		{`{"status":"busy","worker_id":"w1","in_flight":1,"capacity":1,"results":[{"job_id":"j1",` + both + `,"status":"busy"}]}`,
			func(b []byte) error { _, err := DecodeOfferReply(b); return err }, "results[0]"},
		{`{"worker_id":"w1","leases":[{"job_id":"j1","claim":3},{"job_id":"j2",` + both + `}]}`,
			func(b []byte) error { _, err := DecodeHeartbeat(b); return err }, "leases[1]"},
		{`{"lost":[{"job_id":"j1",` + both + `}]}`,
			func(b []byte) error { _, err := DecodeHeartbeatAck(b); return err }, "lost[0]"},
		{`{"cancel":[{"job_id":"j1",` + both + `}]}`,
			func(b []byte) error { _, err := DecodeHeartbeatAck(b); return err }, "cancel[0]"},
		{`{"job_id":"j1",` + both + `,"state":"running","reason":"stale"}`,
			func(b []byte) error { _, err := DecodeRequeue(b); return err }, ""},
		{`{"job_id":"j1",` + both + `}`,
			func(b []byte) error { _, err := DecodeCancelJob(b); return err }, ""},
		{`{"job_id":"j1",` + both + `,"worker_id":"w1","progress":{"percent":5}}`,
			func(b []byte) error { _, err := DecodeProgressReport(b); return err }, ""},
	} {
		err := tc.decode([]byte(tc.body))
		var de *DecodeError
		require.True(t, errors.As(err, &de), "%s: %v", tc.body, err)
		require.Equal(t, &DecodeError{Path: tc.path, Reason: "attempt 7 and claim 8 disagree"}, de, tc.body)
	}
}

// The messages between the services decode in one pass: reading the claim
// under either name allocates no more than decoding the same fields into
// a type that knows only one (counted, not timed).
func TestMessagesDecodeTheClaimInOnePass(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
	results := make([][]byte, 100)
	for i := range results {
		results[i] = fmt.Appendf(nil, `{"job_id":"job-%d","attempt":%d,"worker_id":"worker-01","state":"succeeded","result":{"n":%d}}`, i, i+1, i)
	}
	msg := EncodeResultBatch(results)
	type plainResult struct {
		JobID     string          `json:"job_id"`
		Claim     int64           `json:"attempt"`
		WorkerID  string          `json:"worker_id"`
		State     JobState        `json:"state"`
		Error     string          `json:"error,omitempty"`
		Result    json.RawMessage `json:"result,omitempty"`
		Permanent bool            `json:"permanent,omitempty"`
	}
	plain := testing.AllocsPerRun(20, func() {
		var m struct {
			Results []plainResult `json:"results"`
		}
		if err := decodeStrict(msg, &m); err != nil {
			t.Fatal(err)
		}
	})
	compat := testing.AllocsPerRun(20, func() {
		if _, err := DecodeResults(msg); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, compat, plain+float64(len(results))/10,
		"decoding %d results allocates %.0f times, their plain fields %.0f", len(results), compat, plain)
}
