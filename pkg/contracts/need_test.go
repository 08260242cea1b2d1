package contracts

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResourceDefaultsNeed(t *testing.T) {
	t.Parallel()
	d := ResourceDefaults{Kinds: map[string]Resources{"enc": {CPU: 2, Memory: 1 << 30}}, Share: Resources{CPU: 0.5, Memory: 256 << 20}}
	for _, tc := range []struct {
		name     string
		kind     string
		declared *Resources
		want     Resources
	}{
		{"none declared: the kind's default", "enc", nil, Resources{CPU: 2, Memory: 1 << 30}},
		{"none declared, no kind default: a slot's share", "sleep", nil, Resources{CPU: 0.5, Memory: 256 << 20}},
		{"all declared", "enc", &Resources{CPU: 0.25, Memory: 64 << 20}, Resources{CPU: 0.25, Memory: 64 << 20}},
		{"memory left out: the kind's", "enc", &Resources{CPU: 3}, Resources{CPU: 3, Memory: 1 << 30}},
		{"cpu left out: the share's", "sleep", &Resources{Memory: 1 << 20}, Resources{CPU: 0.5, Memory: 1 << 20}},
		{"zero declared: the defaults", "sleep", &Resources{}, Resources{CPU: 0.5, Memory: 256 << 20}},
	} {
		require.Equal(t, tc.want, d.Need(tc.kind, tc.declared), tc.name)
	}
	require.Equal(t, Resources{}, SlotShare(Resources{CPU: 4, Memory: 4 << 30}, 0), "unlimited slots: no share")
	require.Equal(t, Resources{CPU: 1, Memory: 1 << 30}, SlotShare(Resources{CPU: 4, Memory: 4 << 30}, 4))
	for _, slots := range []int{3, 6, 7, 9, 11, 256} {
		capacity := Resources{CPU: 2, Memory: 1 << 30}
		share, free := SlotShare(capacity, slots), capacity
		for i := range slots {
			require.True(t, share.Fits(free), "2 cores over %d slots: share %d fits", slots, i+1)
			free = free.Sub(share)
		}
	}
	w := WorkerInfo{Capacity: 2, Resources: &Resources{CPU: 2, Memory: 2 << 30}}
	require.Equal(t, Resources{CPU: 1, Memory: 1 << 30}, w.Defaults().Need("x", nil), "announced capacity over announced slots")
}

func TestNeverFits(t *testing.T) {
	t.Parallel()
	small := WorkerInfo{ID: "a", Kinds: []string{"enc"}, Capacity: 1, Resources: &Resources{CPU: 1, Memory: 1 << 30}}
	big := WorkerInfo{ID: "b", Kinds: []string{"enc"}, Capacity: 1, Resources: &Resources{CPU: 4, Memory: 2 << 30}}
	other := WorkerInfo{ID: "c", Kinds: []string{"other"}, Capacity: 1, Resources: &Resources{CPU: 64, Memory: 64 << 30}}
	old := WorkerInfo{ID: "d", Kinds: []string{"enc"}, Capacity: 1}
	for _, tc := range []struct {
		name     string
		workers  []WorkerInfo
		declared *Resources
		never    bool
	}{
		{"no workers known", nil, &Resources{CPU: 100}, false},
		{"none declared", []WorkerInfo{small}, nil, false},
		{"fits the big one", []WorkerInfo{small, big}, &Resources{CPU: 3}, false},
		{"exactly the capacity", []WorkerInfo{big}, &Resources{CPU: 4, Memory: 2 << 30}, false},
		{"more than any", []WorkerInfo{small, big}, &Resources{CPU: 5}, true},
		{"memory more than any", []WorkerInfo{small, big}, &Resources{Memory: 3 << 30}, true},
		{"only a worker of another kind is big enough", []WorkerInfo{small, other}, &Resources{CPU: 8}, true},
		{"only workers of another kind", []WorkerInfo{other}, &Resources{CPU: 128}, false},
		{"a worker that does not count resources may take it", []WorkerInfo{small, old}, &Resources{CPU: 8}, false},
	} {
		why, never := NeverFits(tc.workers, "enc", tc.declared)
		require.Equal(t, tc.never, never, tc.name)
		if never {
			require.Contains(t, why, "more than any live worker of kind \"enc\"", tc.name)
		}
	}
}
