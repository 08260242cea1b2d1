package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestStreamReplicasSurviveANodeLoss creates the job stream at 3 replicas
// on a 3-node cluster through Dial, loses a node while publishing and
// brings it back: every acknowledged message is still there, and the
// node catches up.
func TestStreamReplicasSurviveANodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: skipped with -short")
	}
	t.Parallel()
	c := bustest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := bus.Env{URL: c.URL(), StreamReplicas: 3}
	require.NoError(t, env.Validate())
	l, err := bus.Dial(ctx, env, t.TempDir(), "cluster-test", nil)
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	require.Equal(t, 3, bus.Replicas(l.JS))

	// The meta leader is elected once the nodes see each other.
	var s jetstream.Stream
	require.Eventually(t, func() bool {
		// Without a meta leader a JetStream request gets no answer:
		// each try has its own deadline.
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		defer tcancel()
		s, err = bus.EnsureStream(tctx, l.JS)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "stream never created")
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)

	publish := func(n int) {
		for i := range n {
			require.Eventually(t, func() bool {
				tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
				defer tcancel()
				_, err := l.JS.Publish(tctx, contracts.SubjectDue, []byte(`{"job_id":"j"}`))
				return err == nil
			}, 20*time.Second, 50*time.Millisecond, "publish %d never acknowledged", i)
		}
	}
	publish(50)
	// Lose a node that is not the client's: the stream keeps a quorum.
	victim := 0
	if l.Conn.ConnectedServerName() == c.Server(0).Name() {
		victim = 1
	}
	c.Stop(victim)
	publish(50)
	c.Start(victim)
	publish(50)

	require.Eventually(t, func() bool {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		defer tcancel()
		info, err := s.Info(tctx)
		return err == nil && info.State.Msgs == 150 && len(info.Cluster.Replicas) == 2 && allCurrent(info.Cluster.Replicas)
	}, 30*time.Second, 100*time.Millisecond, "the restarted node never caught up")

	// Read from the restarted node alone.
	nc, err := nats.Connect(c.Server(victim).ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	rs, err := js.Stream(ctx, contracts.StreamName)
	require.NoError(t, err)
	ri, err := rs.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 150, ri.State.Msgs)
}

// allCurrent reports whether every replica is current.
func allCurrent(peers []*jetstream.PeerInfo) bool {
	for _, p := range peers {
		if !p.Current {
			return false
		}
	}
	return true
}

func TestEnvValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env bus.Env
		ok  bool
	}{
		{bus.Env{StreamReplicas: 1}, true},
		{bus.Env{URL: "nats://a:4222", StreamReplicas: 3}, true},
		{bus.Env{StreamReplicas: 0}, false},
		{bus.Env{URL: "nats://a:4222", StreamReplicas: 6}, false},
		{bus.Env{StreamReplicas: 3}, false}, // embedded server: one node
	} {
		err := tc.env.Validate()
		if tc.ok {
			require.NoError(t, err, "%+v", tc.env)
			continue
		}
		require.ErrorContains(t, err, "SLUICE_STREAM_REPLICAS", "%+v", tc.env)
	}
	require.Equal(t, 1, bus.Replicas(nil))
}
