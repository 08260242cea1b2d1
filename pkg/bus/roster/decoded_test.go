package roster

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func marshal(t testing.TB, a contracts.Announce) []byte {
	b, err := json.Marshal(a)
	require.NoError(t, err)
	return b
}

// TestDecodedFindsNumberedRepeats: a worker's numbered announcements all
// differ, but while it goes back and forth between a few states they are
// found without decoding, with their own seq, and the memory holds one
// entry per state.
func TestDecodedFindsNumberedRepeats(t *testing.T) {
	t.Parallel()
	var d decoded
	for i := range 1000 {
		want := contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 4, InFlight: i % 4, IntervalMS: 1000, Seq: uint64(1_800_000_000_000_000_000 + i)}
		got, err := d.decode(marshal(t, want))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	unnumbered := contracts.Announce{WorkerID: "w2", Capacity: 1, IntervalMS: 1000}
	for range 3 {
		got, err := d.decode(marshal(t, unnumbered))
		require.NoError(t, err)
		require.Equal(t, unnumbered, got)
	}
	require.Len(t, d.m, 5, "four states of w1, one of w2")
}

// TestKeyOfSplitsOnlyAfterAMember: the key of a numbered announcement is
// its cacheable part (contracts.SplitAnnounce); an object whose only
// member is a seq after a stray comma is not cut down to "{}", a valid
// object the whole is not.
func TestKeyOfSplitsOnlyAfterAMember(t *testing.T) {
	t.Parallel()
	var d decoded
	for _, tc := range []struct {
		b, key   string
		seq      uint64
		numbered bool
	}{
		{`{"worker_id":"w1","seq":9}`, `{"worker_id":"w1"}`, 9, true},
		{`{"worker_id":"w1"}`, `{"worker_id":"w1"}`, 0, false},
		{`{,"seq":9}`, `{,"seq":9}`, 0, false},
		{`{ ,"seq":9}`, `{ ,"seq":9}`, 0, false},
	} {
		key, seq, numbered := d.keyOf([]byte(tc.b))
		require.Equal(t, tc.key, string(key), tc.b)
		require.Equal(t, tc.seq, seq, tc.b)
		require.Equal(t, tc.numbered, numbered, tc.b)
	}
}

// decodedCases are announcements in and around the forms the cache
// treats specially (a trailing seq), valid and not.
var decodedCases = []string{
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":42}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":43}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":0}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":042}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":-1}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":18446744073709551616}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":1.5}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":+9}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":1_000}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":7,"seq":8}`,
	`{"worker_id":"w1","seq":7,"kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,,"seq":9}`,
	`{,"seq":9}`,
	`{"worker_id":"w1","capacity":-2,"seq":9}`,
	`{"worker_id":"w1","kinds":["k"],"capacity":2,"in_flight":1,"interval_ms":1000,"seq":9} `,
	`,"seq":9}`,
	``,
}

// requireSameAsDecodeAnnounce checks that the cache answers b as
// contracts.DecodeAnnounce does.
func requireSameAsDecodeAnnounce(t *testing.T, d *decoded, b []byte) {
	want, wantErr := contracts.DecodeAnnounce(b)
	got, err := d.decode(b)
	if wantErr != nil {
		require.Error(t, err, "%s", b)
		return
	}
	require.NoError(t, err, "%s", b)
	require.Equal(t, want, got, "%s", b)
}

// TestDecodedAnswersAsDecodeAnnounce: whatever the cache holds, it answers
// every input exactly as a fresh decode does.
func TestDecodedAnswersAsDecodeAnnounce(t *testing.T) {
	t.Parallel()
	var d decoded
	for range 2 { // cold, then warm
		for _, c := range decodedCases {
			requireSameAsDecodeAnnounce(t, &d, []byte(c))
		}
	}
}

// FuzzDecoded: after any announcement warmed the cache, any other is
// answered as a fresh decode answers it.
func FuzzDecoded(f *testing.F) {
	for _, a := range decodedCases {
		for _, b := range decodedCases {
			f.Add([]byte(a), []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var d decoded
		requireSameAsDecodeAnnounce(t, &d, first)
		requireSameAsDecodeAnnounce(t, &d, second)
		requireSameAsDecodeAnnounce(t, &d, first)
	})
}
