package cli

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestTenantWatcherResumes(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	var conns atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.handle("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		switch conns.Add(1) {
		case 1:
			writeStream(t, w, stateEvent("11", contracts.StateRunning, 1, ""), progressEvent("12", 20, "p"))
		default:
			writeStream(t, w, stateEvent("13", contracts.StateSucceeded, 1, ""))
			<-r.Context().Done()
		}
	})
	var out strings.Builder
	d := &cancelOnFinal{display: newLineDisplay(&out, &out, true), cancel: cancel} // the user presses Ctrl-C
	tw := &tenantWatcher{client: f.client(), show: d, reconnects: 3, backoff: time.Millisecond, idleTimeout: 5 * time.Second}
	err := tw.run(ctx, "10")
	require.ErrorIs(t, err, context.Canceled)
	reqs := f.sent("/v1/events")
	require.Len(t, reqs, 2)
	require.Equal(t, "10", reqs[0].Header.Get("Last-Event-ID"), "--since is the first Last-Event-ID")
	require.Equal(t, "12", reqs[1].Header.Get("Last-Event-ID"))
	text := out.String()
	require.Contains(t, text, "running")
	require.Contains(t, text, "progress   20% sleeping: p")
	require.Contains(t, text, "succeeded")
	require.Contains(t, text, "event stream dropped")
}

func TestTenantWatcherWithoutRoute(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitFailed, te.run("watch"))
	require.Contains(t, te.stderr.String(), "has no event stream (GET /v1/events)")
}

func TestTenantWatcherGivesUp(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		writeTestError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "down")
	})
	var out strings.Builder
	tw := &tenantWatcher{client: f.client(), show: newLineDisplay(&out, &out, true), reconnects: 2, backoff: time.Millisecond}
	err := tw.run(context.Background(), "")
	require.ErrorContains(t, err, "keeps failing")
	require.Len(t, f.sent("/v1/events"), 3)
}

// cancelOnFinal is a display that cancels once it has shown a final state.
type cancelOnFinal struct {
	display
	cancel context.CancelFunc
}

func (c *cancelOnFinal) update(u Update) {
	c.display.update(u)
	if u.Event.State.Final() {
		c.cancel()
	}
}

// TestTenantWatcherShowsAChangeOnce: a final state that reaches the stream
// twice (the gateway and the scheduler both publish a cancel) is one line.
func TestTenantWatcherShowsAChangeOnce(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.handle("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w,
			stateEvent("11", contracts.StateRunning, 1, ""),
			stateEvent("12", contracts.StateCancelled, 1, "cancelled: cancelled by request"),
			func() sseEvent { // the same end, told again in other words
				ev := stateEvent("13", contracts.StateCancelled, 1, "cancelled: cancelled by request (worker stopped)")
				e := ev.data.(contracts.Event)
				e.Worker = ""
				ev.data = e
				return ev
			}(),
			progressEvent("14", 0, "the end of this test's stream"))
		<-r.Context().Done()
	})
	var out strings.Builder
	d := &cancelOnProgress{display: newLineDisplay(&out, &out, true), cancel: cancel}
	tw := &tenantWatcher{client: f.client(), show: d, reconnects: 3, backoff: time.Millisecond, idleTimeout: 5 * time.Second}
	require.ErrorIs(t, tw.run(ctx, ""), context.Canceled)
	require.Equal(t, 1, strings.Count(out.String(), "cancelled  claim"), out.String())
}

// cancelOnProgress is a display that cancels once it has shown progress.
type cancelOnProgress struct {
	display
	cancel context.CancelFunc
}

func (c *cancelOnProgress) update(u Update) {
	c.display.update(u)
	if u.Event.Type == contracts.EventProgress {
		c.cancel()
	}
}
