package cli

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// fastFollower is a follower with test timings.
func fastFollower(c *Client) (*follower, *updates) {
	u := &updates{}
	f := newFollower(c, u.add)
	f.pollEvery, f.backoff, f.idleTimeout = 5*time.Millisecond, time.Millisecond, 5*time.Second
	return f, u
}

// updates records what a follower reported.
type updates struct {
	mu   sync.Mutex
	list []Update
}

func (u *updates) add(up Update) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.list = append(u.list, up)
}

// kinds lists the reported events as "type/state" or "progress/percent".
func (u *updates) kinds() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, up := range u.list {
		if up.Event.Type == contracts.EventProgress {
			out = append(out, "progress")
			continue
		}
		out = append(out, up.Event.Type+"/"+string(up.Event.State))
	}
	return out
}

func TestFollowEventStream(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w,
			sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StatePending)},
			stateEvent("2", contracts.StateRunning, 1, ""),
			progressEvent("3", 50, "half"),
			sseEvent{id: "4", typ: "future-kind", data: map[string]int{"x": 1}},
			stateEvent("5", contracts.StateSucceeded, 1, ""),
		)
	})
	final := testJob(contracts.StateSucceeded)
	final.Result = []byte(`{"slept_ms":2000}`)
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { writeTestJSON(w, 200, final) })

	fl, u := fastFollower(f.client())
	job, raw, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, job.State)
	require.JSONEq(t, `{"slept_ms":2000}`, string(job.Result), "the final job is read again for its result")
	require.Contains(t, string(raw), "slept_ms")
	require.Equal(t, []string{"snapshot/pending", "state/running", "progress", "state/succeeded"}, u.kinds())
	require.Equal(t, 50.0, u.list[2].Job.Progress.Percent)
	require.Equal(t, "text/event-stream", f.sent("/v1/jobs/" + testID + "/events")[0].Header.Get("Accept"))
}

func TestFollowReconnectsWithLastEventID(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	var conns atomic.Int32
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		switch conns.Add(1) {
		case 1: // drops after two events
			writeStream(t, w,
				sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StatePending)},
				stateEvent("2", contracts.StateRunning, 1, ""))
		case 2: // the server is briefly unavailable
			writeTestError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "try again")
		default: // resumes without a new snapshot
			writeStream(t, w, progressEvent("3", 90, "nearly"), stateEvent("4", contracts.StateFailed, 1, "handler: boom"))
		}
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateFailed))
	})
	fl, u := fastFollower(f.client())
	job, _, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateFailed, job.State)
	require.Equal(t, []string{"snapshot/pending", "state/running", "progress", "state/failed"}, u.kinds())

	reqs := f.sent("/v1/jobs/" + testID + "/events")
	require.Len(t, reqs, 3)
	require.Empty(t, reqs[0].Header.Get("Last-Event-ID"))
	require.Equal(t, "2", reqs[1].Header.Get("Last-Event-ID"))
	require.Equal(t, "2", reqs[2].Header.Get("Last-Event-ID"))
}

func TestFollowPollsWithoutEventRoute(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t) // no events route: the gateway's JSON 404
	var reads atomic.Int32
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		n := reads.Add(1)
		j := testJob(contracts.StatePending)
		switch {
		case n >= 5:
			j = testJob(contracts.StateCancelled)
			j.Error = "cancelled: cancelled by request"
		case n >= 3:
			j = testJob(contracts.StateRunning)
			j.Progress = &contracts.Progress{Percent: 10}
		}
		writeTestJSON(w, 200, j)
	})
	fl, u := fastFollower(f.client())
	job, raw, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateCancelled, job.State)
	require.Contains(t, string(raw), "cancelled by request")
	require.Equal(t, []string{"snapshot/pending", "state/running", "progress", "state/cancelled"}, u.kinds())
}

func TestFollowFallsBackToPollingWhenStreamKeepsFailing(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w) // opens, sends only a ping, closes
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateSucceeded))
	})
	fl, u := fastFollower(f.client())
	var notes []string
	fl.onNote = func(s string) { notes = append(notes, s) }
	job, _, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, job.State)
	require.Len(t, f.sent("/v1/jobs/"+testID+"/events"), fl.reconnects+1)
	require.Equal(t, []string{"snapshot/succeeded"}, u.kinds())
	require.Contains(t, notes[len(notes)-1], "polling")
}

func TestFollowIdleStreamReconnects(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	var conns atomic.Int32
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		if conns.Add(1) == 1 {
			writeStream(t, w, sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StateRunning)})
			<-r.Context().Done() // then silence: no event, no ping
			return
		}
		writeStream(t, w, stateEvent("2", contracts.StateSucceeded, 1, ""))
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateSucceeded))
	})
	fl, _ := fastFollower(f.client())
	fl.idleTimeout = 50 * time.Millisecond
	job, _, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, job.State)
	require.Equal(t, "1", f.sent("/v1/jobs/" + testID + "/events")[1].Header.Get("Last-Event-ID"))
}

func TestFollowErrors(t *testing.T) {
	t.Parallel()
	t.Run("unknown job", func(t *testing.T) {
		t.Parallel()
		f := newFakeServer(t)
		notFound := func(w http.ResponseWriter, r *http.Request) {
			writeTestError(w, http.StatusNotFound, contracts.CodeNotFound, "no such job")
		}
		f.handle("GET /v1/jobs/{id}/events", notFound)
		f.handle("GET /v1/jobs/{id}", notFound)
		fl, _ := fastFollower(f.client())
		_, _, err := fl.follow(context.Background(), testID)
		var ae *APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusNotFound, ae.Status)
		require.Equal(t, "no such job", ae.Message)
	})
	t.Run("unauthorized", func(t *testing.T) {
		t.Parallel()
		f := newFakeServer(t)
		f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
			writeTestError(w, http.StatusUnauthorized, contracts.CodeUnauthorized, "a valid API token is required")
		})
		fl, _ := fastFollower(f.client())
		_, _, err := fl.follow(context.Background(), testID)
		var ae *APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusUnauthorized, ae.Status)
		require.Len(t, f.sent("/v1/jobs/"+testID+"/events"), 1, "no retry on 401")
	})
	t.Run("server gone", func(t *testing.T) {
		t.Parallel()
		f := newFakeServer(t)
		c := f.client()
		f.srv.Close()
		fl, _ := fastFollower(c)
		_, _, err := fl.follow(context.Background(), testID)
		require.ErrorContains(t, err, "cannot reach the server")
	})
	t.Run("cancelled context", func(t *testing.T) {
		t.Parallel()
		f := newFakeServer(t)
		f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
			writeStream(t, w, sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StateRunning)})
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		fl, u := fastFollower(f.client())
		fl.onUpdate = func(up Update) { u.add(up); cancel() }
		_, _, err := fl.follow(ctx, testID)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestFollowFinalSnapshot(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w, sseEvent{id: "9", typ: contracts.EventSnapshot, data: testJob(contracts.StateCancelled)})
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateCancelled))
	})
	fl, u := fastFollower(f.client())
	job, _, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateCancelled, job.State)
	require.Equal(t, []string{"snapshot/cancelled"}, u.kinds())
}

func TestApply(t *testing.T) {
	t.Parallel()
	running := contracts.Event{Type: contracts.EventState, JobID: testID, State: contracts.StateRunning, Claim: 2, Worker: "w2", At: testTime}
	tests := []struct {
		name  string
		job   contracts.Job
		ev    contracts.Event
		ok    bool
		state contracts.JobState
	}{
		{"state moves the job", testJob(contracts.StatePending), running, true, contracts.StateRunning},
		{"other job", testJob(contracts.StatePending), contracts.Event{Type: contracts.EventState, JobID: "other", State: contracts.StateRunning}, false, contracts.StatePending},
		{"older attempt", func() contracts.Job { j := testJob(contracts.StateRunning); j.Claim = 3; return j }(), running, false, contracts.StateRunning},
		{"nothing leaves a final state", testJob(contracts.StateSucceeded), running, false, contracts.StateSucceeded},
		{"progress without progress", testJob(contracts.StateRunning), contracts.Event{Type: contracts.EventProgress, JobID: testID, Claim: 1}, false, contracts.StateRunning},
		{"unknown type", testJob(contracts.StateRunning), contracts.Event{Type: "x", JobID: testID, Claim: 1}, false, contracts.StateRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := tc.job
			require.Equal(t, tc.ok, apply(&j, tc.ev))
			require.Equal(t, tc.state, j.State)
		})
	}
}

// TestApplyCountsRuns: events carry no run count, so a running event for a
// new claim counts one run, and a repeat of it none.
func TestApplyCountsRuns(t *testing.T) {
	t.Parallel()
	j := testJob(contracts.StateRunning) // claim 1, 1 run
	requeued := contracts.Event{Type: contracts.EventState, JobID: testID, State: contracts.StatePending, Claim: 2, At: testTime}
	running := contracts.Event{Type: contracts.EventState, JobID: testID, State: contracts.StateRunning, Claim: 3, Worker: "w2", At: testTime}
	require.True(t, apply(&j, requeued))
	require.Equal(t, 1, j.Attempt, "a requeue is no run")
	require.True(t, apply(&j, running))
	require.Equal(t, 2, j.Attempt, "claim 3 went running")
	require.True(t, apply(&j, running))
	require.Equal(t, 2, j.Attempt, "the same run again")
	require.Equal(t, "running    attempt 2/3  claim 3  on w2", describe(running, j))
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	require.Equal(t, 250*time.Millisecond, backoffFor(250*time.Millisecond, 1))
	require.Equal(t, 500*time.Millisecond, backoffFor(250*time.Millisecond, 2))
	require.Equal(t, 2*time.Second, backoffFor(250*time.Millisecond, 4))
	require.Equal(t, maxBackoff, backoffFor(250*time.Millisecond, 40))
}

// TestFollowStopsOn204 checks that a job already final, whose event stream
// answers 204 No Content, is read once and reported, with no reconnect.
func TestFollowStopsOn204(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	var opens atomic.Int32
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		opens.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateSucceeded))
	})
	fl, u := fastFollower(f.client())
	job, raw, err := fl.follow(context.Background(), testID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, job.State)
	require.NotEmpty(t, raw)
	require.Equal(t, []string{"snapshot/succeeded"}, u.kinds())
	require.Equal(t, int32(1), opens.Load(), "no reconnect after 204")
}
