package roster

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestDecodedKeepsOneAnnouncementPerWorker: a busy worker's announcements
// all differ (their seq grows); only each worker's last one is kept, and a
// repeat of it is found without decoding.
func TestDecodedKeepsOneAnnouncementPerWorker(t *testing.T) {
	t.Parallel()
	var d decoded
	raw := func(a contracts.Announce) []byte {
		b, err := json.Marshal(a)
		require.NoError(t, err)
		return b
	}
	var first, last []byte
	for i := range 1000 {
		a := contracts.Announce{WorkerID: "w1", Capacity: 4, InFlight: i % 4, IntervalMS: 1000, Seq: uint64(100 + i)}
		last = raw(a)
		if i == 0 {
			first = last
		}
		d.put(last, a)
	}
	idle := contracts.Announce{WorkerID: "w2", Capacity: 1, IntervalMS: 1000, Seq: 7}
	d.put(raw(idle), idle)
	require.Len(t, d.m, 2)

	got, ok := d.get(last)
	require.True(t, ok)
	require.Equal(t, uint64(1099), got.Seq)
	_, ok = d.get(first)
	require.False(t, ok, "an older announcement of w1 is forgotten")
	got, ok = d.get(raw(idle))
	require.True(t, ok, "an idle worker's repeated announcement is found")
	require.Equal(t, idle, got)
}
