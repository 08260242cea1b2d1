package devstack

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// sseEvent is one Server-Sent Event as a test reads it.
type sseEvent struct {
	ID   string // opaque
	Type string
	Data string
}

// openSSE opens path as an event stream and returns the events as they
// come; the channel closes when the server ends the stream.
func (b *bundle) openSSE(ctx context.Context, path string, header http.Header) (<-chan sseEvent, *http.Response) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	require.NoError(b.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp
	}
	require.Equal(b.t, "text/event-stream", resp.Header.Get("Content-Type"))
	ch := make(chan sseEvent, 256)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Type != "" {
					select {
					case ch <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.Type = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch, resp
}

// readAll reads a stream until the server closes it.
func readAll(t *testing.T, ch <-chan sseEvent, within time.Duration) []sseEvent {
	t.Helper()
	var got []sseEvent
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("stream not closed within %s; got %d events: %+v", within, len(got), got)
		}
	}
}

func decodeEvent(t *testing.T, ev sseEvent) contracts.Event {
	t.Helper()
	e, err := contracts.DecodeEvent([]byte(ev.Data))
	require.NoError(t, err, ev.Data)
	require.Equal(t, ev.Type, e.Type)
	return e
}

func TestJobEventsFromSnapshotToFinalState(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_PROGRESS_INTERVAL": "100ms"})
	job := b.mustSubmit("sleep", map[string]int{"ms": 1500})

	ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	got := readAll(t, ch, 30*time.Second)
	require.NotEmpty(t, got)

	require.Equal(t, contracts.EventSnapshot, got[0].Type)
	var snap contracts.Job
	require.NoError(t, json.Unmarshal([]byte(got[0].Data), &snap))
	require.Equal(t, job.ID, snap.ID)
	require.True(t, snap.State.Active(), "snapshot of a fresh job is %s", snap.State)

	var states []contracts.JobState
	progress := 0
	lastPct := -1.0
	var lastClaim int64
	lastID := got[0].ID
	for _, ev := range got[1:] {
		require.NotEmpty(t, ev.ID)
		require.NotEqual(t, lastID, ev.ID, "each event has an id of its own")
		lastID = ev.ID
		e := decodeEvent(t, ev)
		require.Equal(t, job.ID, e.JobID)
		switch e.Type {
		case contracts.EventState:
			states = append(states, e.State)
		case contracts.EventProgress:
			progress++
			if e.Claim != lastClaim {
				// Another run (an offer whose answer came too late under
				// load is given back and run again) starts from nothing.
				lastClaim, lastPct = e.Claim, -1
			}
			require.GreaterOrEqual(t, e.Progress.Percent, lastPct, "progress goes forward within a run")
			lastPct = e.Progress.Percent
			require.Equal(t, "sleeping", e.Progress.Stage)
		}
	}
	require.NotEmpty(t, states)
	require.Equal(t, contracts.StateSucceeded, states[len(states)-1], "the stream closes after the final state")
	if snap.State == contracts.StatePending {
		require.Contains(t, states, contracts.StateRunning)
	}
	require.GreaterOrEqual(t, progress, 3, "a 1.5 s sleep reports progress several times")

	// The job records the last progress it was sent.
	final := b.job(job.ID)
	require.NotNil(t, final.Progress)
	require.Equal(t, "sleeping", final.Progress.Stage)
}

// TestJobEventsOfAFinishedJob checks that a standard EventSource client
// stops: after the final event its reconnect (with Last-Event-ID) is
// answered 204 No Content. A first request for a job already final gets
// its snapshot, then the stream closes; reconnecting after that snapshot
// is a 204 too.
func TestJobEventsOfAFinishedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil)
	job := b.mustSubmit("sleep", map[string]int{"ms": 300})

	ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	got := readAll(t, ch, 20*time.Second)
	last := got[len(got)-1]
	require.Equal(t, contracts.StateSucceeded, decodeEvent(t, last).State)

	reconnect := func(id string) *http.Response {
		ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", http.Header{"Last-Event-Id": {id}})
		require.Nil(t, ch)
		return resp
	}
	require.Equal(t, http.StatusNoContent, reconnect(last.ID).StatusCode, "the reconnect after the final event")

	// A first request for a finished job: its snapshot, then the end.
	ch, resp = b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	got = readAll(t, ch, 20*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, contracts.EventSnapshot, got[0].Type)
	var snap contracts.Job
	require.NoError(t, json.Unmarshal([]byte(got[0].Data), &snap))
	require.Equal(t, contracts.StateSucceeded, snap.State)
	require.Equal(t, http.StatusNoContent, reconnect(got[0].ID).StatusCode, "the reconnect after the snapshot")
}

func TestSinceMustNameAnIssuedEventID(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil)
	job := b.mustSubmit("sleep", map[string]int{"ms": 0})
	b.waitFinal(job.ID, 20*time.Second)

	// Event ids are opaque: a number (such as a stream sequence) is none.
	for _, path := range []string{"/v1/events?since=999999", "/v1/events?since=1", "/v1/jobs/" + job.ID + "/events?since=999999"} {
		ch, resp := b.openSSE(t.Context(), path, nil)
		require.Nil(t, ch, path)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
	}
	// An id the stream issued (the finished job's snapshot carries one)
	// resumes after it: the next job's first event comes next.
	ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	got := readAll(t, ch, 20*time.Second)
	require.Len(t, got, 1)
	next := b.mustSubmit("sleep", map[string]int{"ms": 0})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, resp = b.openSSE(ctx, "/v1/events?since="+got[0].ID, nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	select {
	case ev := <-ch:
		require.Equal(t, next.ID, decodeEvent(t, ev).JobID)
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the snapshot's id")
	}
}

func TestJobEventsOfUnknownJobIs404(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, nil)
	ch, resp := b.openSSE(t.Context(), "/v1/jobs/nosuchjob/events", nil)
	require.Nil(t, ch)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	ch, resp = b.openSSE(t.Context(), "/v1/events?since=minus-one", nil)
	require.Nil(t, ch)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestCancelledJobStreamEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil)
	job := b.mustSubmit("sleep", map[string]int{"ms": 60_000})
	b.waitState(job.ID, contracts.StateRunning, 20*time.Second)
	ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)

	code, body := b.cancelJob(job.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))

	got := readAll(t, ch, 20*time.Second)
	last := decodeEvent(t, got[len(got)-1])
	require.Equal(t, contracts.StateCancelled, last.State)
	require.Equal(t, string(contracts.ClassCancelled), string(contracts.ClassOf(last.Error)))
}

func TestTenantEventsFollowEveryJobAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 2}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, resp := b.openSSE(ctx, "/v1/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)

	ids := map[string]bool{}
	for range 3 {
		ids[b.mustSubmit("sleep", map[string]int{"ms": 10}).ID] = true
	}
	// Every job goes pending → running → succeeded on the stream.
	seen := map[string][]contracts.JobState{}
	var all []sseEvent
	done := func() bool {
		for id := range ids {
			s := seen[id]
			if len(s) == 0 || s[len(s)-1] != contracts.StateSucceeded {
				return false
			}
		}
		return true
	}
	timeout := time.After(30 * time.Second)
	for !done() {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "tenant stream closed")
			all = append(all, ev)
			e := decodeEvent(t, ev)
			require.Equal(t, "default", e.Tenant)
			if e.Type == contracts.EventState {
				seen[e.JobID] = append(seen[e.JobID], e.State)
			}
		case <-timeout:
			t.Fatalf("not every job reached succeeded on the stream: %v", seen)
		}
	}
	for id := range ids {
		require.Equal(t, []contracts.JobState{contracts.StatePending, contracts.StateRunning, contracts.StateSucceeded}, seen[id], id)
	}
	cancel()

	// Resuming after the first event replays the rest, in the same order.
	rctx, rcancel := context.WithCancel(t.Context())
	defer rcancel()
	rch, resp := b.openSSE(rctx, "/v1/events", http.Header{"Last-Event-Id": {all[0].ID}})
	require.NotNil(t, rch, "status %d", resp.StatusCode)
	for i, want := range all[1:] {
		select {
		case ev := <-rch:
			require.Equal(t, want.ID, ev.ID, "replayed event %d", i)
			require.Equal(t, want.Data, ev.Data)
		case <-time.After(10 * time.Second):
			t.Fatalf("replay stopped after %d of %d events", i, len(all)-1)
		}
	}
}
