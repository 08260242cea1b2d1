package progress_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects what a throttle sends and signals each send.
type recorder struct {
	mu   sync.Mutex
	got  []contracts.Progress
	sent chan struct{}
}

func newRecorder() *recorder { return &recorder{sent: make(chan struct{}, 100)} }

func (r *recorder) send(p contracts.Progress) {
	r.mu.Lock()
	r.got = append(r.got, p)
	r.mu.Unlock()
	r.sent <- struct{}{}
}

func (r *recorder) all() []contracts.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]contracts.Progress(nil), r.got...)
}

func pct(n float64) contracts.Progress { return contracts.Progress{Percent: n} }

// clock is a settable clock.
func TestFirstReportGoesAtOnceThenLatestWins(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	clk := clocktest.At(time.Unix(1000, 0))
	// A long interval: the kept report is only sent by the timer, which
	// this test never waits for; Stop drops it.
	th := progress.NewThrottle(time.Hour, rec.send, clk.Now)
	for i := range 100 {
		th.Report(pct(float64(i)))
	}
	sent, coalesced := th.Stop()
	require.Equal(t, []contracts.Progress{pct(0)}, rec.all(), "only the first report went out")
	require.Equal(t, 1, sent)
	require.Equal(t, 98, coalesced, "reports 1..98 were replaced by a newer one")
	th.Report(pct(100))
	require.Len(t, rec.all(), 1, "nothing is sent after Stop")
}

func TestKeptReportIsSentWhenTheIntervalEnds(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	th := progress.NewThrottle(20*time.Millisecond, rec.send, nil)
	defer th.Stop()
	th.Report(pct(1))
	th.Report(pct(2))
	th.Report(pct(3))
	for range 2 {
		select {
		case <-rec.sent:
		case <-time.After(10 * time.Second):
			t.Fatal("kept report never sent")
		}
	}
	require.Equal(t, []contracts.Progress{pct(1), pct(3)}, rec.all(), "the latest kept report, never an older one")
}

func TestReportAfterTheIntervalGoesAtOnce(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	clk := clocktest.At(time.Unix(1000, 0))
	th := progress.NewThrottle(time.Second, rec.send, clk.Now)
	defer th.Stop()
	th.Report(pct(10))
	clk.Advance(time.Second)
	th.Report(pct(20))
	clk.Advance(2 * time.Second)
	th.Report(pct(30))
	require.Equal(t, []contracts.Progress{pct(10), pct(20), pct(30)}, rec.all())
}

func TestReportFromContext(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	th := progress.NewThrottle(time.Hour, rec.send, nil)
	defer th.Stop()

	require.ErrorIs(t, progress.Report(t.Context(), pct(5)), progress.ErrNoJob)

	ctx := progress.With(t.Context(), th)
	require.NoError(t, progress.Report(ctx, contracts.Progress{Percent: 5, Stage: "copy", Message: "1 of 20"}))
	require.Equal(t, []contracts.Progress{{Percent: 5, Stage: "copy", Message: "1 of 20"}}, rec.all())

	for _, bad := range []contracts.Progress{{Percent: -1}, {Percent: 101}, {Stage: string(make([]byte, 65))}} {
		require.Error(t, progress.Report(ctx, bad), "%+v", bad)
	}

	cctx, cancel := context.WithCancelCause(ctx)
	cancel(context.Canceled)
	require.ErrorIs(t, progress.Report(cctx, pct(6)), context.Canceled, "a finished attempt reports nothing")
	require.Len(t, rec.all(), 1)
}
