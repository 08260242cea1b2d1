package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// quietConfig announces only when something changes (or on discover).
func quietConfig(t testing.TB, id string) worker.Config {
	cfg := testConfig(t, id)
	cfg.HeartbeatInterval = time.Minute
	cfg.StaleThreshold = 3 * time.Minute
	return cfg
}

func TestAnnounceLoadAndLeaving(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	cfg := quietConfig(t, "w-announce")
	cfg.MaxConcurrent = 2
	cfg.CPU, cfg.Memory = 2, "1GiB"
	r := b.start(cfg, map[string]worker.Handler{"block": h.handle, "another": echoHandler})

	first := b.sched.announcements()[0]
	seq := first.Seq
	require.NotZero(t, seq, "load reports are numbered")
	first.Seq = 0
	require.Equal(t, contracts.Announce{
		WorkerID: "w-announce", Kinds: []string{"another", "block"}, Capacity: 2, InFlight: 0,
		IntervalMS: time.Minute.Milliseconds(), Version: contracts.Release,
		Resources: &contracts.Resources{CPU: 2, Memory: 1 << 30}, FreeResources: &contracts.Resources{CPU: 2, Memory: 1 << 30},
	}, first)

	reply := b.offer("w-announce", spec("a1", "block", 1, ""))
	require.Equal(t, contracts.OfferAccepted, reply.Status)
	require.Equal(t, 1, reply.InFlight)
	require.Greater(t, reply.Seq, seq, "the acceptance's reply is numbered after the idle announcement")
	h.waitStarted(t)
	busy := b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.InFlight == 1 && a.Capacity == 2 })
	require.Equal(t, reply.Seq, busy.Seq, "the same load, read after the same change")
	half := &contracts.Resources{CPU: 1, Memory: 512 << 20}
	require.Equal(t, half, reply.FreeResources, "a job without a declaration takes one slot's share")
	require.Equal(t, half, busy.FreeResources)

	close(h.release)
	require.Equal(t, "a1", b.nextResult().JobID)
	require.Eventually(t, func() bool {
		all := b.sched.announcements()
		return all[len(all)-1].InFlight == 0 && len(all) >= 3
	}, waitFor, 5*time.Millisecond, "the last announcement shows the last load")
	all := b.sched.announcements()
	require.Greater(t, all[len(all)-1].Seq, reply.Seq, "idle again, and numbered after the busy reply")

	r.cancel()
	require.NoError(t, r.wait(t))
	leaving := b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Leaving })
	require.True(t, leaving.Draining)
	require.Equal(t, 0, leaving.InFlight)
	all = b.sched.announcements()
	require.Equal(t, leaving, all[len(all)-1], "nothing is announced after leaving")
}

func TestDiscoverTriggersAnnounce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(quietConfig(t, "w-discover"), nil)
	before := len(b.sched.announcements())
	require.NoError(t, b.nc.Publish(contracts.SubjectDiscover, nil))
	require.Eventually(t, func() bool { return len(b.sched.announcements()) > before }, waitFor, 5*time.Millisecond)
	a := b.sched.announcements()[before]
	require.Equal(t, "w-discover", a.WorkerID)
	require.Equal(t, 1, a.Capacity)
	require.Empty(t, a.Kinds)
}
