package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// readEvents GETs an event stream with token and the given headers and
// reads it to its end: the status, and the events of a 200.
func (b *bundle) readEvents(path, token string, header map[string]string) (int, []sse.Event) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, b.gws[0].srv.URL+path, nil)
	require.NoError(b.tb, err)
	hr.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		hr.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(hr)
	require.NoError(b.tb, err)
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, nil
	}
	require.Equal(b.tb, "text/event-stream", res.Header.Get("Content-Type"))
	var out []sse.Event
	r := sse.NewReader(res.Body)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return res.StatusCode, out
		}
		require.NoError(b.tb, err, "the stream of a final job ends by itself")
		out = append(out, ev)
	}
}

// publishState publishes job's state event as the scheduler would and
// waits until the event stream holds it; it returns its sequence.
func (b *bundle) publishState(job contracts.Job) uint64 {
	b.tb.Helper()
	ctx := context.Background()
	before, err := events.LastSeq(ctx, b.js)
	require.NoError(b.tb, err)
	events.NewPublisher(b.nc).State(job)
	require.NoError(b.tb, b.nc.Flush())
	var seq uint64
	waitUntil(b.tb, func() bool {
		seq, err = events.LastSeq(ctx, b.js)
		require.NoError(b.tb, err)
		return seq > before
	})
	return seq
}

// TestEventsOfAFinishedJob: the first request for the event stream of a job
// that already ended gets its snapshot, then the stream closes (it used to
// be answered 204). A reconnect after the final event is answered 204, so
// an EventSource stops; one from before the final event gets the final
// snapshot.
func TestEventsOfAFinishedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := events.EnsureStream(t.Context(), b.js)
	require.NoError(t, err)
	job := b.submit(tokenA, `{"kind":"watched"}`).job(t)
	running := b.publishState(b.start(job.ID, "w-1"))
	final := b.publishState(b.finish(job.ID))
	other := b.submit(tokenA, `{"kind":"watched"}`).job(t) // a later event of another job
	after := b.publishState(b.start(other.ID, "w-1"))
	path := "/v1/jobs/" + job.ID + "/events"

	status, evs := b.readEvents(path, tokenA, nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, evs, 1, "one snapshot, then the end")
	require.Equal(t, contracts.EventSnapshot, evs[0].Type)
	var snap contracts.Job
	require.NoError(t, json.Unmarshal([]byte(evs[0].Data), &snap))
	require.Equal(t, job.ID, snap.ID)
	require.Equal(t, contracts.StateSucceeded, snap.State)
	require.Equal(t, strconv.FormatUint(after, 10), evs[0].ID, "the snapshot carries the newest event id")

	// A reconnect after the snapshot, or after the final event: 204.
	for _, id := range []uint64{after, final} {
		status, _ = b.readEvents(path, tokenA, map[string]string{"Last-Event-ID": strconv.FormatUint(id, 10)})
		require.Equal(t, http.StatusNoContent, status, "Last-Event-ID %d", id)
	}
	status, _ = b.readEvents(path+"?since="+strconv.FormatUint(final, 10), tokenA, nil)
	require.Equal(t, http.StatusNoContent, status)

	// A reconnect before the final event: the final snapshot, then the end.
	for _, h := range []map[string]string{
		{"Last-Event-ID": strconv.FormatUint(running, 10)},
		{"Last-Event-ID": "0"},
	} {
		status, evs = b.readEvents(path, tokenA, h)
		require.Equal(t, http.StatusOK, status, h)
		require.Len(t, evs, 1, h)
		require.Equal(t, contracts.EventSnapshot, evs[0].Type)
		require.Equal(t, strconv.FormatUint(after, 10), evs[0].ID)
	}

	// Another tenant still sees nothing of it.
	status, _ = b.readEvents(path, tokenB, nil)
	require.Equal(t, http.StatusNotFound, status)
}
