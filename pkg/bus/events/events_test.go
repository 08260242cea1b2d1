package events_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *events.Publisher
}

func setup(t *testing.T) bundle {
	t.Helper()
	nc, js := bustest.Start(t).Connect("events")
	_, err := events.EnsureStream(t.Context(), js)
	require.NoError(t, err)
	return bundle{nc: nc, js: js, pub: events.NewPublisher(nc)}
}

func stateEvent(tenant, id string, st contracts.JobState, attempt int64) contracts.Event {
	return contracts.StateEvent(contracts.Job{ID: id, Tenant: tenant, Kind: "sleep", State: st, Claim: attempt,
		UpdatedAt: time.Now().UTC()})
}

// next reads one event or fails after a generous wait.
func next(t *testing.T, f *events.Follower) events.Received {
	t.Helper()
	select {
	case r, ok := <-f.C():
		require.True(t, ok, "follower closed: %v", f.Err())
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return events.Received{}
}

func TestStreamConfigKeepsEventsForResume(t *testing.T) {
	t.Parallel()
	cfg := events.StreamConfig()
	require.Equal(t, contracts.EventStreamName, cfg.Name)
	require.Equal(t, []string{contracts.EventStreamSubjects}, cfg.Subjects)
	require.Equal(t, jetstream.LimitsPolicy, cfg.Retention)
	require.Equal(t, jetstream.FileStorage, cfg.Storage)
	require.Positive(t, cfg.MaxAge)
	require.Positive(t, cfg.MaxBytes)
}

func TestEnsureStreamLiftsAnOldPerSubjectLimit(t *testing.T) {
	t.Parallel()
	_, js := bustest.Start(t).Connect("events")
	old := events.StreamConfig()
	old.MaxMsgsPerSubject = 1000 // what older releases created
	_, err := js.CreateStream(t.Context(), old)
	require.NoError(t, err)

	s, err := events.EnsureStream(t.Context(), js)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(-1), info.Config.MaxMsgsPerSubject)
	require.Equal(t, int64(events.MaxBytes), info.Config.MaxBytes, "the rest of the stream is as it was")

	// A second start finds nothing to change.
	_, err = events.EnsureStream(t.Context(), js)
	require.NoError(t, err)
}

func TestFollowJobFromNowOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pub.Publish(stateEvent("acme", "j1", contracts.StatePending, 0)) // before the follower: not seen
	waitSeq(t, b, 1)

	f, err := events.FollowJob(t.Context(), b.js, "acme", "j1", 0)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, uint64(1), f.Start)

	// Another job on the same subject (its bucket), and one on another:
	// neither reaches j1's follower.
	b.pub.Publish(stateEvent("acme", sameBucket(t, "acme", "j1"), contracts.StateRunning, 1))
	b.pub.Publish(stateEvent("acme", "j2", contracts.StateRunning, 1))
	b.pub.State(contracts.Job{ID: "j1", Tenant: "acme", State: contracts.StateRunning, Claim: 1, Worker: "w1"})
	b.pub.Publish(contracts.Event{Type: contracts.EventProgress, JobID: "j1", Tenant: "acme", Claim: 1,
		Progress: &contracts.Progress{Percent: 50, Stage: "copy"}, At: time.Now()})

	r := next(t, f)
	require.Equal(t, uint64(4), r.Seq)
	require.Equal(t, contracts.EventState, r.Event.Type)
	require.Equal(t, contracts.StateRunning, r.Event.State)
	require.Equal(t, "w1", r.Event.Worker)
	r = next(t, f)
	require.Equal(t, uint64(5), r.Seq)
	require.Equal(t, contracts.EventProgress, r.Event.Type)
	require.InDelta(t, 50, r.Event.Progress.Percent, 0)
	require.Zero(t, b.pub.Dropped())
}

func TestFollowTenantResumesAfterSequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A tenant name with a dot still maps to one subject token.
	for i, id := range []string{"a1", "a2", "a3"} {
		b.pub.Publish(stateEvent("acme.eu", id, contracts.StatePending, int64(i)))
		b.pub.Publish(stateEvent("other", id, contracts.StatePending, int64(i)))
	}
	waitSeq(t, b, 6)

	f, err := events.Follow(t.Context(), b.js, contracts.TenantEventSubjects("acme.eu"), 1)
	require.NoError(t, err)
	defer f.Close()
	for _, want := range []struct {
		seq uint64
		id  string
	}{{3, "a2"}, {5, "a3"}} {
		r := next(t, f)
		require.Equal(t, want.seq, r.Seq)
		require.Equal(t, want.id, r.Event.JobID)
		require.Equal(t, "acme.eu", r.Event.Tenant)
	}
}

func TestFollowAfterBeyondTheEndStartsAtTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pub.Publish(stateEvent("acme", "j1", contracts.StatePending, 0))
	waitSeq(t, b, 1)
	// A client's Last-Event-ID from before the stream was recreated.
	f, err := events.Follow(t.Context(), b.js, contracts.TenantEventSubjects("acme"), 999)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, uint64(1), f.Start)
	b.pub.Publish(stateEvent("acme", "j1", contracts.StateRunning, 1))
	r := next(t, f)
	require.Equal(t, uint64(2), r.Seq)
}

func TestCloseEndsTheFollower(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f, err := events.Follow(t.Context(), b.js, contracts.TenantEventSubjects("acme"), 0)
	require.NoError(t, err)
	f.Close()
	f.Close() // idempotent
	_, ok := <-f.C()
	require.False(t, ok)
	require.NoError(t, f.Err())
}

func TestNilPublisherPublishesNothing(t *testing.T) {
	t.Parallel()
	var p *events.Publisher
	p.State(contracts.Job{ID: "j1", Tenant: "acme", State: contracts.StatePending})
	require.Zero(t, p.Dropped())
}

// waitSeq waits until the stream holds n events.
func waitSeq(t *testing.T, b bundle, n uint64) {
	t.Helper()
	require.NoError(t, b.nc.Flush())
	s, err := b.js.Stream(t.Context(), contracts.EventStreamName)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := s.Info(t.Context())
		return err == nil && info.State.LastSeq >= n
	}, 10*time.Second, 5*time.Millisecond)
}

// sameBucket returns a job id other than id whose events share id's
// subject.
func sameBucket(t *testing.T, tenant, id string) string {
	t.Helper()
	for i := range 100_000 {
		other := fmt.Sprintf("other-%d", i)
		if contracts.EventSubject(tenant, other) == contracts.EventSubject(tenant, id) {
			return other
		}
	}
	t.Fatal("no job id shares the bucket")
	return ""
}

// TestLastJobSeq: the newest event on a job's subject, whatever other
// tenants published after it; 0 for a subject with none.
func TestLastJobSeq(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seq, err := events.LastJobSeq(t.Context(), b.js, "acme", "j1")
	require.NoError(t, err)
	require.Zero(t, seq)
	b.pub.Publish(stateEvent("acme", "j1", contracts.StatePending, 0))
	b.pub.Publish(stateEvent("other", "j1", contracts.StatePending, 0))
	b.pub.Publish(stateEvent("other", "j2", contracts.StatePending, 0))
	waitSeq(t, b, 3)
	seq, err = events.LastJobSeq(t.Context(), b.js, "acme", "j1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), seq)
}
