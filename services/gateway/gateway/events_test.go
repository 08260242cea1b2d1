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
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/eventid"
	"github.com/sluicehq/sluice/services/gateway/internal/httpapi"
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

// eventIDs is the codec of the bundle's event ids.
func (b *bundle) eventIDs() *eventid.Codec {
	b.tb.Helper()
	au, err := auth.Parse(b.cfg.APITokens)
	require.NoError(b.tb, err)
	return httpapi.EventIDs(au)
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

	ids := b.eventIDs()
	newest, err := events.LastJobSeq(t.Context(), b.js, tenantA, job.ID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, newest, final)

	status, evs := b.readEvents(path, tokenA, nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, evs, 1, "one snapshot, then the end")
	require.Equal(t, contracts.EventSnapshot, evs[0].Type)
	var snap contracts.Job
	require.NoError(t, json.Unmarshal([]byte(evs[0].Data), &snap))
	require.Equal(t, job.ID, snap.ID)
	require.Equal(t, contracts.StateSucceeded, snap.State)
	require.Equal(t, ids.ID(tenantA, newest), evs[0].ID, "the snapshot carries the id of the job subject's newest event")

	// A reconnect after the snapshot, after the final event, or after a
	// later event of the tenant: 204.
	for _, seq := range []uint64{newest, final, after} {
		status, _ = b.readEvents(path, tokenA, map[string]string{"Last-Event-ID": ids.ID(tenantA, seq)})
		require.Equal(t, http.StatusNoContent, status, "Last-Event-ID of %d", seq)
	}
	status, _ = b.readEvents(path+"?since="+ids.ID(tenantA, final), tokenA, nil)
	require.Equal(t, http.StatusNoContent, status)

	// A reconnect before the final event, or with an id that is not the
	// tenant's (from now on): the final snapshot, then the end.
	for _, h := range []map[string]string{
		{"Last-Event-ID": ids.ID(tenantA, running)},
		{"Last-Event-ID": "0"},
		{"Last-Event-ID": ids.ID(tenantB, final)},
	} {
		status, evs = b.readEvents(path, tokenA, h)
		require.Equal(t, http.StatusOK, status, h)
		require.Len(t, evs, 1, h)
		require.Equal(t, contracts.EventSnapshot, evs[0].Type)
		require.Equal(t, ids.ID(tenantA, newest), evs[0].ID)
	}
	// A since that is not the tenant's id: 400.
	for _, since := range []string{strconv.FormatUint(final, 10), ids.ID(tenantB, final), "x"} {
		status, _ = b.readEvents(path+"?since="+since, tokenA, nil)
		require.Equal(t, http.StatusBadRequest, status, since)
	}

	// Another tenant still sees nothing of it.
	status, _ = b.readEvents(path, tokenB, nil)
	require.Equal(t, http.StatusNotFound, status)
}

// TestEventIDsTellNothingOfOtherTenants: what a tenant's event streams
// answer does not change with other tenants' activity, and a bad ?since=
// names no number. (Before, event ids were the stream's sequence, which
// counts every tenant's events: a final job's snapshot carried the newest
// sequence of the whole stream, and ?since= past it answered "the newest
// is N".)
func TestEventIDsTellNothingOfOtherTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := events.EnsureStream(t.Context(), b.js)
	require.NoError(t, err)
	job := b.submit(tokenA, `{"kind":"watched"}`).job(t)
	b.publishState(b.finish(job.ID))
	path := "/v1/jobs/" + job.ID + "/events"
	status, before := b.readEvents(path, tokenA, nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, before, 1)
	_, err = strconv.ParseUint(before[0].ID, 10, 64)
	require.Error(t, err, "an event id is no sequence number: %q", before[0].ID)

	// Another tenant works; the stream grows.
	var last uint64
	for range 5 {
		other := b.submit(tokenB, `{"kind":"busy"}`).job(t)
		last = b.publishState(b.start(other.ID, "w-1"))
	}
	status, after := b.readEvents(path, tokenA, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, before[0].ID, after[0].ID, "another tenant's events changed what acme sees")

	// A since past the newest event, or made up: one 400, no number.
	for _, since := range []string{"1", strconv.FormatUint(last, 10), strconv.FormatUint(last+1, 10), "999999", b.eventIDs().ID(tenantB, last)} {
		for _, p := range []string{"/v1/events?since=" + since, path + "?since=" + since} {
			e := b.do(req{method: http.MethodGet, path: p, token: tokenA}).requireError(t, http.StatusBadRequest, contracts.CodeBadRequest)
			require.NotRegexp(t, `[0-9]`, e.Message, p)
		}
	}
}
