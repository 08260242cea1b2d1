package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimelineSpreadsFaultsOverTheLoad(t *testing.T) {
	t.Parallel()
	p := Profile{Load: 100 * time.Second, NATSRestarts: 1, StreamDeletes: 2, Sigstops: 3, StoreRestarts: 2}
	tl := p.timeline(true)
	count := map[string]int{}
	for i, pf := range tl {
		count[pf.kind]++
		require.Positive(t, pf.at)
		require.Less(t, pf.at, p.Load, "every fault falls inside the load")
		if i > 0 {
			require.GreaterOrEqual(t, pf.at, tl[i-1].at, "sorted by time")
		}
	}
	require.Equal(t, map[string]int{"natsd": 1, faultStreamDelete: 2, faultSigstop: 3, "store": 2}, count)
	require.NotContains(t, kinds(p.timeline(false)), "store", "no store process, no store restarts")
}

func kinds(tl []plannedFault) []string {
	var out []string
	for _, pf := range tl {
		out = append(out, pf.kind)
	}
	return out
}

func TestPickTenantWeights(t *testing.T) {
	t.Parallel()
	c := &Cluster{Tenants: []Tenant{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	rng := newLockedRand(1)
	n := map[string]int{}
	for range 6000 {
		n[c.pickTenant(rng).Name]++
	}
	require.Greater(t, n["a"], n["b"])
	require.Greater(t, n["b"], n["c"])
	require.Positive(t, n["c"])
}

// TestRestartLeavesASpawnedWorkerDead checks that a random kill restarts
// a service but not a spawned worker (nothing restarts those: the
// schedulers ask for another), so the harness never brings back a spawned
// worker the schedulers saw die or leave.
func TestRestartLeavesASpawnedWorkerDead(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	dir := t.TempDir()
	f := &faults{p: Profile{Logf: t.Logf}, kills: map[string]int{}}
	for _, transient := range []bool{false, true} {
		p := &Proc{Name: fmt.Sprintf("worker-transient-%v", transient), Service: "worker", bin: sleep, args: []string{"60"},
			log: filepath.Join(dir, fmt.Sprintf("%v.log", transient)), transient: transient}
		require.NoError(t, p.start())
		t.Cleanup(p.kill)
		require.NoError(t, f.restart(context.Background(), p, 0))
		require.Equal(t, !transient, p.alive(), "transient=%v", transient)
		lives, _ := p.history()
		require.Len(t, lives, map[bool]int{false: 2, true: 1}[transient])
	}
	require.Equal(t, 2, f.kills["worker"])
}
