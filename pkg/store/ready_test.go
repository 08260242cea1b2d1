package store

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestKeySlots(t *testing.T) {
	t.Parallel()
	counted := map[string]int{}
	slots := NewKeySlots(func(tenant, key string) (int, error) {
		counted[tenant+"/"+key]++
		if key == "broken" {
			return 0, errors.New("store down")
		}
		return map[string]int{"acme/db": 1}[tenant+"/"+key], nil
	})
	take := func(tenant, key string, limit int) bool {
		ok, err := slots.Take(tenant, key, limit)
		require.NoError(t, err)
		return ok
	}
	require.True(t, take("acme", "", 1), "no key, no limit")
	require.True(t, take("acme", "db", 2), "one holder, limit 2")
	require.False(t, take("acme", "db", 2), "now two")
	require.True(t, take("globex", "db", 2), "keys are per tenant")
	slots.Give("acme", "db")
	require.True(t, take("acme", "db", 2), "a slot given back is free again")
	require.Equal(t, map[string]int{"acme/db": 1, "globex/db": 1}, counted, "each key counted once")
	_, err := slots.Take("acme", "broken", 1)
	require.Error(t, err)
}

func TestSlots(t *testing.T) {
	t.Parallel()
	type take struct {
		kind string
		want string // "" = none left
	}
	tests := []struct {
		name    string
		r       ClaimRequest
		running map[string]int
		takes   []take
	}{
		{"in order, each entry a slot", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1", "w2"}}}, nil,
			[]take{{"a", "w1"}, {"a", "w1"}, {"a", "w2"}, {"a", ""}}},
		{"a worker's room is shared by its kinds", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w2"}, "b": {"w1"}}, Room: map[string]int{"w1": 1, "w2": 1}}, nil,
			[]take{{"b", "w1"}, {"a", "w2"}, {"a", ""}, {"b", ""}}},
		{"bounded by capacity less running", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1", "w1"}}, Capacity: map[string]int{"w1": 3}}, map[string]int{"w1": 2},
			[]take{{"a", "w1"}, {"a", ""}}},
		{"capacity 0 is no bound", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1"}}, Capacity: map[string]int{"w1": 0}}, map[string]int{"w1": 9},
			[]take{{"a", "w1"}, {"a", "w1"}, {"a", ""}}},
		{"more running than capacity: none", ClaimRequest{Slots: map[string][]string{"a": {"w1"}}, Capacity: map[string]int{"w1": 2}}, map[string]int{"w1": 3},
			[]take{{"a", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counted := map[string]int{}
			s, err := tc.r.NewSlots(RunningOn{Count: func(w string) (int, error) { counted[w]++; return tc.running[w], nil }})
			require.NoError(t, err)
			for i, tk := range tc.takes {
				w, ok, more := s.Fit(tk.kind, nil)
				require.Equal(t, tk.want, w, "take %d", i)
				require.Equal(t, tk.want != "", ok)
				require.Equal(t, ok, more, "count only: a job fits wherever there is room")
				if ok {
					s.Take(tk.kind, w, nil)
				}
			}
			for w, n := range counted {
				require.Equal(t, 1, n, "worker %s counted once", w)
			}
		})
	}
}

// TestSlotsPackByResources: each job, in claim order, goes to the first
// worker (in slot order) whose free resources and room fit it; a job that
// fits nowhere now waits and holds the first worker that could ever hold
// it, so the smaller jobs behind it go elsewhere.
func TestSlotsPackByResources(t *testing.T) {
	t.Parallel()
	cpu := func(c float64) *contracts.Resources { return &contracts.Resources{CPU: c} }
	two := WorkerResources{Capacity: contracts.Resources{CPU: 2, Memory: 4 << 30},
		Defaults: contracts.ResourceDefaults{Share: contracts.Resources{CPU: 1, Memory: 2 << 30}}}
	four := WorkerResources{Capacity: contracts.Resources{CPU: 4, Memory: 8 << 30},
		Defaults: contracts.ResourceDefaults{Kinds: map[string]contracts.Resources{"a": {CPU: 0.5}}, Share: contracts.Resources{CPU: 1}}}
	slots := func(ws ...string) map[string][]string {
		var list []string
		for _, w := range ws {
			list = append(list, w, w, w, w)
		}
		return map[string][]string{"a": list}
	}
	type job struct {
		req  *contracts.Resources
		want string // the worker; "" = waits; "-" = no room left at all
	}
	tests := []struct {
		name    string
		r       ClaimRequest
		running map[string][]RunningJob
		jobs    []job
		held    string
	}{
		{"first fit in worker order: load gathers on the first worker",
			ClaimRequest{Slots: slots("w1", "w2"), Resources: map[string]WorkerResources{"w1": two, "w2": two}}, nil,
			[]job{{cpu(1), "w1"}, {cpu(1), "w1"}, {cpu(1), "w2"}, {cpu(1), "w2"}, {cpu(1), ""}}, ""},
		{"a 2-cpu job never beside a 1-cpu one on a 2-cpu worker",
			ClaimRequest{Slots: slots("w1", "w2"), Resources: map[string]WorkerResources{"w1": two, "w2": two}}, nil,
			[]job{{cpu(1), "w1"}, {cpu(2), "w2"}, {cpu(1), "w1"}, {cpu(1), ""}}, ""},
		{"what the store shows running is taken first",
			ClaimRequest{Slots: slots("w1", "w2"), Resources: map[string]WorkerResources{"w1": two, "w2": two}},
			map[string][]RunningJob{"w1": {{Kind: "a", Resources: cpu(1.5)}}},
			[]job{{cpu(1), "w2"}, {cpu(0.5), "w1"}, {cpu(1), "w2"}, {cpu(0.1), ""}}, ""},
		{"undeclared jobs count as the kind's default, else a slot's share",
			ClaimRequest{Slots: slots("w1", "w2"), Resources: map[string]WorkerResources{"w1": two, "w2": four}},
			map[string][]RunningJob{"w1": {{Kind: "other"}}},
			[]job{{nil, "w1"}, {nil, "w2"}, {nil, "w2"}, {nil, "w2"}, {nil, "w2"}, {nil, ""}}, ""},
		{"a declaration's missing member is the default's",
			ClaimRequest{Slots: slots("w1"), Resources: map[string]WorkerResources{"w1": two}}, nil,
			[]job{{&contracts.Resources{Memory: 3 << 30}, "w1"}, {cpu(1), ""}}, ""},
		{"a worker that counts no resources takes any job it has room for",
			ClaimRequest{Slots: map[string][]string{"a": {"w0", "w1", "w1"}}, Resources: map[string]WorkerResources{"w1": two}}, nil,
			[]job{{cpu(64), "w0"}, {cpu(64), ""}, {cpu(2), "w1"}, {cpu(0.1), ""}}, ""},
		{"the head that fits nowhere holds the first worker that could hold it",
			ClaimRequest{Slots: slots("w1", "w2", "w3"), Resources: map[string]WorkerResources{"w1": two, "w2": four, "w3": four}},
			map[string][]RunningJob{"w1": {{Kind: "a", Resources: cpu(1)}}, "w2": {{Kind: "a", Resources: cpu(1)}}, "w3": {{Kind: "a", Resources: cpu(1)}}},
			[]job{{cpu(4), ""}, {cpu(1), "w1"}, {cpu(1), "w3"}, {cpu(1), "w3"}, {cpu(4), ""}, {cpu(1), "w3"}, {cpu(1), ""}}, "w2"},
		{"no worker could ever hold it: it holds none",
			ClaimRequest{Slots: slots("w1"), Resources: map[string]WorkerResources{"w1": two}}, nil,
			[]job{{cpu(8), ""}, {cpu(1), "w1"}, {cpu(1), "w1"}}, ""},
		{"count still bounds: capacity less running",
			ClaimRequest{Slots: slots("w1"), Capacity: map[string]int{"w1": 2}, Resources: map[string]WorkerResources{"w1": four}},
			map[string][]RunningJob{"w1": {{Kind: "a", Resources: cpu(0.1)}}},
			[]job{{cpu(0.1), "w1"}, {cpu(0.1), "-"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := tc.r.NewSlots(RunningOn{
				Count: func(w string) (int, error) { return len(tc.running[w]), nil },
				Jobs:  func(w string) ([]RunningJob, error) { return tc.running[w], nil },
			})
			require.NoError(t, err)
			for i, j := range tc.jobs {
				w, ok, more := s.Fit("a", j.req)
				switch j.want {
				case "-":
					require.False(t, more, "job %d: no room left", i)
				case "":
					require.True(t, more, "job %d: room left", i)
					require.False(t, ok, "job %d waits, got %s", i, w)
				default:
					require.True(t, ok, "job %d", i)
					require.Equal(t, j.want, w, "job %d", i)
					s.Take("a", w, j.req)
				}
			}
			if tc.held != "" {
				require.True(t, s.held[tc.held], "%s is held", tc.held)
				require.Len(t, s.held, 1, "one worker held per kind")
			}
		})
	}
}
