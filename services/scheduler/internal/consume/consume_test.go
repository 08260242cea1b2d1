package consume

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	t  *testing.T
	js jetstream.JetStream
}

func setup(t *testing.T) *bundle {
	t.Helper()
	_, js := bustest.Start(t).Connect("scheduler")
	return &bundle{t: t, js: js}
}

func (b *bundle) publish(n int) {
	b.t.Helper()
	for i := range n {
		require.NoError(b.t, bus.Publish(context.Background(), b.js, contracts.SubjectDue, contracts.Due{JobID: "j" + string(rune('a'+i))}, ""))
	}
}

// run consumes with h until the test ends.
func (b *bundle) run(conc int, h Handler) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, b.js, Options{
			Config:      bus.ConsumerConfig(contracts.ConsumerDue, 5*time.Second, contracts.SubjectDue),
			Concurrency: conc, Log: zerolog.Nop(),
		}, h)
	}()
	b.t.Cleanup(func() {
		cancel()
		require.NoError(b.t, <-done)
	})
}

func TestSettleAckRetryAndPoison(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	seen := map[string]int{}
	b.run(4, func(_ context.Context, _ string, data []byte, _ func()) Settle {
		due, err := contracts.DecodeDue(data)
		if err != nil {
			return Poison()
		}
		mu.Lock()
		defer mu.Unlock()
		seen[due.JobID]++
		if due.JobID == "ja" && seen["ja"] == 1 {
			return RetryIn(100 * time.Millisecond) // comes back once
		}
		return Ack()
	})
	b.publish(3)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["ja"] == 2 && seen["jb"] == 1 && seen["jc"] == 1
	}, 5*time.Second, 10*time.Millisecond)
	// Everything was settled: nothing is left on the work queue.
	require.Eventually(t, func() bool {
		s, err := b.js.Stream(context.Background(), contracts.StreamName)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, 5*time.Second, 10*time.Millisecond)
}

func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var running, peak, total atomic.Int64
	release := make(chan struct{})
	b.run(3, func(context.Context, string, []byte, func()) Settle {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		total.Add(1)
		return Ack()
	})
	b.publish(10)
	require.Eventually(t, func() bool { return running.Load() == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return running.Load() > 3 }, 100*time.Millisecond, 5*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return total.Load() == 10 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, int64(3), peak.Load())
}

func TestConsumerComesBackAfterTheStreamIsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got atomic.Int64
	b.run(2, func(context.Context, string, []byte, func()) Settle {
		got.Add(1)
		return Ack()
	})
	b.publish(1)
	require.Eventually(t, func() bool { return got.Load() == 1 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, b.js.DeleteStream(context.Background(), contracts.StreamName))
	// Publishing re-creates the stream; the loop declares its consumer again.
	require.Eventually(t, func() bool {
		_ = bus.Publish(context.Background(), b.js, contracts.SubjectDue, contracts.Due{JobID: "again"}, "")
		return got.Load() >= 2
	}, 20*time.Second, 200*time.Millisecond)
}

func TestHandlersInFlightDrainWithinTheTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		drain     time.Duration
		wantAlive bool
	}{
		{name: "finishes within the drain timeout", drain: time.Minute, wantAlive: true},
		{name: "cancelled when ctx ends without one", drain: 0, wantAlive: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			started, release := make(chan struct{}), make(chan struct{})
			alive := make(chan bool, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, b.js, Options{
					Config:      bus.ConsumerConfig(contracts.ConsumerDue, 5*time.Second, contracts.SubjectDue),
					Concurrency: 1, DrainTimeout: tc.drain, Log: zerolog.Nop(),
				}, func(hctx context.Context, _ string, _ []byte, _ func()) Settle {
					close(started)
					<-release
					select {
					case <-hctx.Done():
						alive <- false
					case <-time.After(100 * time.Millisecond):
						alive <- true
					}
					return Ack()
				})
			}()
			b.publish(1)
			<-started
			cancel() // shutdown begins while the handler runs
			close(release)
			require.Equal(t, tc.wantAlive, <-alive)
			require.NoError(t, <-done)
		})
	}
}
