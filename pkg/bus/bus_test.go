package bus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startNATS runs an in-process JetStream server for one test and connects to it.
func startNATS(t *testing.T) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := bustest.Start(t)
	nc, js := srv.Connect("bus")
	return srv.NS, nc, js
}

func TestStreamConfig(t *testing.T) {
	t.Parallel()
	cfg := bus.StreamConfig()
	assert.Equal(t, contracts.StreamName, cfg.Name)
	assert.Equal(t, []string{contracts.StreamSubjects}, cfg.Subjects)
	assert.Equal(t, jetstream.WorkQueuePolicy, cfg.Retention)
	assert.Equal(t, jetstream.FileStorage, cfg.Storage)
	assert.Equal(t, jetstream.DiscardOld, cfg.Discard)
	assert.Equal(t, 2*time.Minute, cfg.Duplicates)
	assert.Equal(t, 1, cfg.Replicas)
}

func TestConsumerConfig(t *testing.T) {
	t.Parallel()
	cfg := bus.ConsumerConfig(contracts.ConsumerDue, 30*time.Second, contracts.SubjectDue)
	assert.Equal(t, contracts.ConsumerDue, cfg.Durable)
	assert.Equal(t, contracts.SubjectDue, cfg.FilterSubject)
	assert.Empty(t, cfg.FilterSubjects)
	assert.Equal(t, []string{contracts.SubjectDue}, bus.Filters(cfg))
	assert.Equal(t, jetstream.AckExplicitPolicy, cfg.AckPolicy)
	assert.Equal(t, 30*time.Second, cfg.AckWait)
	assert.Equal(t, -1, cfg.MaxDeliver)
	assert.Equal(t, -1, cfg.MaxAckPending)
	assert.Equal(t, jetstream.DeliverAllPolicy, cfg.DeliverPolicy)

	// Several subjects: FilterSubjects.
	cfg = bus.ConsumerConfig(contracts.ConsumerResult, time.Second, contracts.ConsumerSubjects(contracts.ConsumerResult)...)
	assert.Empty(t, cfg.FilterSubject)
	assert.Equal(t, []string{contracts.ResultSubjects, contracts.LegacySubjectResult}, cfg.FilterSubjects)
	assert.Equal(t, []string{contracts.LegacySubjectResult, contracts.ResultSubjects}, bus.Filters(cfg), "sorted")
}

// TestEnsureConsumerMovesAnOldFilter: a deployment upgraded from a release
// whose result consumer read the shared result subject alone keeps its
// durable consumer and the messages waiting in it; EnsureConsumer moves
// its filter to the per-worker subjects (and the shared one), and leaves a
// consumer that already reads them as it is.
func TestEnsureConsumerMovesAnOldFilter(t *testing.T) {
	t.Parallel()
	_, _, js := startNATS(t)
	ctx := t.Context()
	_, err := bus.EnsureStream(ctx, js)
	require.NoError(t, err)
	old := bus.ConsumerConfig(contracts.ConsumerResult, 30*time.Second, contracts.LegacySubjectResult)
	_, err = js.CreateOrUpdateConsumer(ctx, contracts.StreamName, old)
	require.NoError(t, err)
	require.NoError(t, bus.Publish(ctx, js, contracts.LegacySubjectResult, contracts.Result{JobID: "old", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}, ""))

	cfg := bus.ConsumerConfig(contracts.ConsumerResult, 30*time.Second, contracts.ConsumerSubjects(contracts.ConsumerResult)...)
	c, err := bus.EnsureConsumer(ctx, js, cfg)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, bus.Filters(cfg), bus.Filters(info.Config), "the filter moved")
	require.Equal(t, uint64(1), info.NumPending, "the waiting message stayed")

	require.NoError(t, bus.Publish(ctx, js, contracts.ResultSubject("w1"), contracts.Result{JobID: "new", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}, ""))
	batch, err := c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var subjects []string
	for m := range batch.Messages() {
		subjects = append(subjects, m.Subject())
		require.NoError(t, m.DoubleAck(ctx))
	}
	require.NoError(t, batch.Error())
	require.Equal(t, []string{contracts.LegacySubjectResult, contracts.ResultSubject("w1")}, subjects)

	// Already moved: left as it is (no update, same consumer).
	again, err := bus.EnsureConsumer(ctx, js, cfg)
	require.NoError(t, err)
	require.Equal(t, info.Created, again.CachedInfo().Created)
	require.Equal(t, bus.Filters(cfg), bus.Filters(again.CachedInfo().Config))
}

func TestStartEmbeddedOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts bus.EmbeddedOptions
	}{
		{"no dir", bus.EmbeddedOptions{NoListen: true}},
		{"listen without port", bus.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1"}},
		{"listen port not a number", bus.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1:http"}},
		{"listen port out of range", bus.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1:65536"}},
		{"missing config file", bus.EmbeddedOptions{Dir: t.TempDir(), NoListen: true, ConfigFile: "/nonexistent/nats.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns, err := bus.StartEmbedded(tt.opts)
			require.Error(t, err)
			assert.Nil(t, ns)
		})
	}
}

func TestStartEmbeddedListens(t *testing.T) {
	t.Parallel()
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", ServerName: "t1"})
	require.NoError(t, err)
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	assert.Equal(t, "t1", ns.Name())
	assert.True(t, ns.JetStreamEnabled())
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Flush())
}

func TestPublishRoundTrip(t *testing.T) {
	t.Parallel()
	_, _, js := startNATS(t)
	ctx := t.Context()

	s, err := bus.EnsureStream(ctx, js)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, jetstream.WorkQueuePolicy, info.Config.Retention)
	assert.Equal(t, []string{contracts.StreamSubjects}, info.Config.Subjects)

	// Ensuring again is a no-op.
	_, err = bus.EnsureStream(ctx, js)
	require.NoError(t, err)

	c, err := bus.EnsureConsumer(ctx, js, bus.ConsumerConfig(contracts.ConsumerDue, 30*time.Second, contracts.SubjectDue))
	require.NoError(t, err)
	cinfo, err := c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, -1, cinfo.Config.MaxDeliver)
	assert.Equal(t, -1, cinfo.Config.MaxAckPending)
	assert.Equal(t, contracts.SubjectDue, cinfo.Config.FilterSubject)

	want := contracts.Due{JobID: "j1"}
	require.NoError(t, bus.Publish(ctx, js, contracts.SubjectDue, want, "due-j1"))
	// The same message id within the window is dropped.
	require.NoError(t, bus.Publish(ctx, js, contracts.SubjectDue, want, "due-j1"))

	info, err = s.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "the duplicate was stored")

	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, msgs, 1)
	assert.Equal(t, contracts.SubjectDue, msgs[0].Subject())
	got, err := contracts.DecodeDue(msgs[0].Data())
	require.NoError(t, err)
	assert.Equal(t, want, got)
	require.NoError(t, msgs[0].DoubleAck(ctx))

	// Work queue: an acknowledged message is gone.
	info, err = s.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs)
}

func TestPublishRecreatesDeletedStream(t *testing.T) {
	t.Parallel()
	_, _, js := startNATS(t)
	ctx := t.Context()

	_, err := bus.EnsureStream(ctx, js)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, contracts.StreamName))
	_, err = js.Stream(ctx, contracts.StreamName)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)

	require.NoError(t, bus.Publish(ctx, js, contracts.ResultSubject("w1"), contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}, ""))

	s, err := js.Stream(ctx, contracts.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs)
	assert.Equal(t, jetstream.WorkQueuePolicy, info.Config.Retention)
	raw, err := s.GetLastMsgForSubject(ctx, contracts.ResultSubject("w1"))
	require.NoError(t, err)
	res, err := contracts.DecodeResult(raw.Data)
	require.NoError(t, err)
	assert.Equal(t, "j1", res.JobID)
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	_, _, js := startNATS(t)
	ctx := t.Context()

	err := bus.Publish(ctx, js, contracts.SubjectDue, make(chan int), "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "encode")

	// A subject outside the stream has no stream to recreate.
	_, err = bus.EnsureStream(ctx, js)
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = bus.Publish(sctx, js, "elsewhere.subject", contracts.Due{JobID: "j1"}, "")
	require.Error(t, err)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	_, nc, js := startNATS(t)
	ctx := t.Context()

	require.Error(t, bus.Check(ctx, nil, nil))
	require.NoError(t, bus.Check(ctx, nc, nil), "no JetStream to check")

	err := bus.Check(ctx, nc, js)
	require.Error(t, err, "the stream does not exist yet")
	assert.ErrorIs(t, err, jetstream.ErrStreamNotFound)

	_, err = bus.EnsureStream(ctx, js)
	require.NoError(t, err)
	require.NoError(t, bus.Check(ctx, nc, js))

	nc.Close()
	err = bus.Check(ctx, nc, js)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not connected")
}

func TestConnectInProcess(t *testing.T) {
	t.Parallel()
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{Dir: t.TempDir(), NoListen: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	nc, err := bus.Connect(t.Context(), bus.ConnectOptions{InProcess: ns, Name: "test-client"})
	require.NoError(t, err)
	defer nc.Close()
	assert.True(t, nc.IsConnected())
	assert.Equal(t, "test-client", nc.Opts.Name)
}

func TestConnectGivesUpWhenCtxEnds(t *testing.T) {
	t.Parallel()
	// Nothing listens on a freshly closed port; Connect retries until ctx ends.
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	url := ns.ClientURL()
	ns.Shutdown()
	ns.WaitForShutdown()

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	nc, err := bus.Connect(ctx, bus.ConnectOptions{URL: url})
	require.Error(t, err)
	assert.Nil(t, nc)
}

func TestDialEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := bus.Dial(t.Context(), bus.Env{}, dir, "test-service", nil)
	require.NoError(t, err)
	require.NotNil(t, l.Embedded)
	require.NotNil(t, l.JS)
	assert.True(t, l.Conn.IsConnected())
	assert.DirExists(t, dir+"/nats/jetstream")

	_, err = bus.EnsureStream(t.Context(), l.JS)
	require.NoError(t, err)
	require.NoError(t, bus.Check(t.Context(), l.Conn, l.JS))

	data, err := json.Marshal(contracts.Due{JobID: "j1"})
	require.NoError(t, err)
	_, err = l.JS.Publish(t.Context(), contracts.SubjectDue, data)
	require.NoError(t, err)

	require.NoError(t, l.Close())
	assert.False(t, l.Embedded.Running())
	assert.Eventually(t, l.Conn.IsClosed, 5*time.Second, time.Millisecond)
}
