package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

var at = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func job(state contracts.JobState) contracts.Job {
	return contracts.Job{ID: "j1", Tenant: "default", Kind: "sleep", State: state, Claim: 1, Attempt: 1, MaxAttempts: 3,
		CreatedAt: at, UpdatedAt: at, DispatchDeadline: at.Add(time.Hour)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, limit string) {
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "3")
	}
	writeJSON(w, status, contracts.ErrorBody{Error: contracts.ErrorDetail{Code: code, Message: "no", Limit: limit}})
}

func writeEvents(w http.ResponseWriter, evs ...sse.Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, ev := range evs {
		_ = sse.Write(w, ev)
	}
}

func data(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestSubmitGetListCancelStats(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		var req contracts.SubmitRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		if req.Key == "again" {
			writeJSON(w, http.StatusOK, job(contracts.StateRunning))
			return
		}
		writeJSON(w, http.StatusAccepted, job(contracts.StatePending))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, job(contracts.StateRunning)) })
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "limit=2&state=running", r.URL.RawQuery)
		writeJSON(w, 200, contracts.JobPage{Jobs: []contracts.Job{job(contracts.StateRunning)}, NextCursor: "c2"})
	})
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		j := job(contracts.StateRunning)
		j.CancelRequested = true
		writeJSON(w, http.StatusAccepted, j)
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, contracts.Stats{MaxActive: 7}) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithToken("tok"))
	require.NoError(t, err)
	ctx := context.Background()

	j, created, err := c.Submit(ctx, contracts.SubmitRequest{Kind: "sleep"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "j1", j.ID)
	_, created, err = c.Submit(ctx, contracts.SubmitRequest{Kind: "sleep", Key: "again"})
	require.NoError(t, err)
	require.False(t, created, "an active job with the key was returned")

	got, err := c.Get(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, contracts.StateRunning, got.State)
	page, err := c.List(ctx, client.Query{State: contracts.StateRunning, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, "c2", page.NextCursor)
	cj, err := c.Cancel(ctx, "j1")
	require.NoError(t, err)
	require.True(t, cj.CancelRequested)
	st, err := c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, st.MaxActive)
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		code   string
		limit  string
		is     error
	}{
		{http.StatusUnauthorized, contracts.CodeUnauthorized, "", client.ErrUnauthorized},
		{http.StatusNotFound, contracts.CodeNotFound, "", client.ErrNotFound},
		{http.StatusConflict, contracts.CodeConflict, "", client.ErrConflict},
		{http.StatusRequestEntityTooLarge, contracts.CodeTooLarge, "", client.ErrTooLarge},
		{http.StatusUnprocessableEntity, contracts.CodeValidation, "", client.ErrInvalid},
		{http.StatusBadRequest, contracts.CodeInvalidJSON, "", client.ErrInvalid},
		{http.StatusTooManyRequests, contracts.CodeTenantCap, contracts.LimitTenant, client.ErrRejected},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeError(w, tc.status, tc.code, tc.limit) }))
			defer srv.Close()
			c, err := client.New(srv.URL)
			require.NoError(t, err)
			_, _, err = c.Submit(context.Background(), contracts.SubmitRequest{Kind: "x"})
			require.ErrorIs(t, err, tc.is)
			var ce *client.Error
			require.True(t, errors.As(err, &ce))
			require.Equal(t, tc.status, ce.Status)
			require.Equal(t, tc.code, ce.Code)
			if tc.status == http.StatusTooManyRequests {
				require.Equal(t, contracts.LimitTenant, ce.Limit)
				require.Equal(t, 3*time.Second, ce.RetryAfter)
			}
		})
	}
	_, err := client.New("ftp://x")
	require.Error(t, err)
	_, err = client.New("127.0.0.1:1", client.WithToken("has space"))
	require.Error(t, err)
}

// TestWaitFollowsReconnectsAndStops: the stream drops after running; the
// reconnect carries Last-Event-ID and gets the final state; Wait returns
// the job read again, and the progress went to the callback.
func TestWaitFollowsReconnectsAndStops(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	var resumedAfter atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		running := contracts.StateEvent(job(contracts.StateRunning))
		switch conns.Add(1) {
		case 1:
			progress := running
			progress.Type, progress.State, progress.Progress = contracts.EventProgress, "", &contracts.Progress{Percent: 40}
			writeEvents(w, sse.Event{ID: "5", Type: contracts.EventSnapshot, Data: data(job(contracts.StatePending))},
				sse.Event{ID: "6", Type: contracts.EventState, Data: data(running)},
				sse.Event{ID: "7", Type: contracts.EventProgress, Data: data(progress)})
		default:
			resumedAfter.Store(r.Header.Get("Last-Event-ID"))
			writeEvents(w, sse.Event{ID: "8", Type: contracts.EventState, Data: data(contracts.StateEvent(job(contracts.StateSucceeded)))})
		}
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		j := job(contracts.StateSucceeded)
		j.Result = json.RawMessage(`{"ok":true}`)
		writeJSON(w, 200, j)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := client.New(srv.URL)
	require.NoError(t, err)
	var seen []string
	final, err := c.Wait(context.Background(), "j1", func(ev contracts.Event) { seen = append(seen, ev.Type+"/"+string(ev.State)) })
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, final.State)
	require.JSONEq(t, `{"ok":true}`, string(final.Result))
	require.Equal(t, []string{"state/pending", "state/running", "progress/", "state/succeeded"}, seen)
	require.Equal(t, "7", resumedAfter.Load())
}

// TestWaitOnAFinishedJob: the stream answers 204; Wait reads the job once.
func TestWaitOnAFinishedJob(t *testing.T) {
	t.Parallel()
	var opens atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		opens.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, job(contracts.StateFailed)) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := client.New(srv.URL)
	require.NoError(t, err)
	var n int
	final, err := c.Wait(context.Background(), "j1", func(contracts.Event) { n++ })
	require.NoError(t, err)
	require.Equal(t, contracts.StateFailed, final.State)
	require.Equal(t, 1, n, "the end is reported once")
	require.Equal(t, int32(1), opens.Load(), "no reconnect after 204")
}
