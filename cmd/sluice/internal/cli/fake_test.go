package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// testID is a job id the fake servers know.
const testID = "01a20614-ad07-7371-8a6b-db7246d430f1"

// testTime is a fixed instant for jobs and events.
var testTime = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeServer is an HTTP API double: each test sets the handlers it needs
// and reads back what the client sent.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server
	mux *http.ServeMux

	mu       sync.Mutex
	requests []*http.Request
}

// newFakeServer starts an empty fake; unknown routes answer the gateway's
// JSON 404.
func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, mux: http.NewServeMux()}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Clone(context.Background()))
		f.mu.Unlock()
		if _, pattern := f.mux.Handler(r); pattern == "" {
			writeTestError(w, http.StatusNotFound, contracts.CodeNotFound, "no such route")
			return
		}
		f.mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// handle registers a handler for a ServeMux pattern.
func (f *fakeServer) handle(pattern string, h http.HandlerFunc) { f.mux.Handle(pattern, h) }

// sent returns the requests received so far whose path is path.
func (f *fakeServer) sent(path string) []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*http.Request
	for _, r := range f.requests {
		if r.URL.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// client returns a client of the fake.
func (f *fakeServer) client() *Client {
	c, err := NewClient(f.srv.URL, "")
	require.NoError(f.t, err)
	return c
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeTestError(w http.ResponseWriter, status int, code, msg string) {
	writeTestJSON(w, status, contracts.ErrorBody{Error: contracts.ErrorDetail{Code: code, Message: msg}})
}

// testJob is a job in state s.
func testJob(s contracts.JobState) contracts.Job {
	j := contracts.Job{ID: testID, Tenant: "default", Kind: "sleep", State: s, MaxAttempts: 3, CreatedAt: testTime, UpdatedAt: testTime}
	if s != contracts.StatePending {
		started := testTime.Add(10 * time.Millisecond)
		j.StartedAt, j.Claim, j.Attempt, j.Worker = &started, 1, 1, "worker-01"
	}
	if s.Final() {
		done := testTime.Add(2 * time.Second)
		j.FinishedAt = &done
	}
	return j
}

// sseEvent is one event a fake stream sends.
type sseEvent struct {
	id   string
	typ  string
	data any
}

// stateEvent is a state event of the test job.
func stateEvent(id string, s contracts.JobState, attempt int64, errText string) sseEvent {
	return sseEvent{id: id, typ: contracts.EventState, data: contracts.Event{
		Type: contracts.EventState, JobID: testID, Tenant: "default", Kind: "sleep",
		State: s, Claim: attempt, Worker: "worker-01", Error: errText, At: testTime,
	}}
}

// progressEvent is a progress event of the test job.
func progressEvent(id string, pct float64, msg string) sseEvent {
	return sseEvent{id: id, typ: contracts.EventProgress, data: contracts.Event{
		Type: contracts.EventProgress, JobID: testID, Tenant: "default", Kind: "sleep", Claim: 1,
		Worker: "worker-01", Progress: &contracts.Progress{Percent: pct, Stage: "sleeping", Message: msg}, At: testTime,
	}}
}

// writeStream answers with an event stream of events, then returns (which
// closes it).
func writeStream(t *testing.T, w http.ResponseWriter, events ...sseEvent) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	_ = sse.WriteComment(&buf, "ping")
	for _, ev := range events {
		data, err := json.Marshal(ev.data)
		require.NoError(t, err)
		require.NoError(t, sse.Write(&buf, sse.Event{ID: ev.id, Type: ev.typ, Data: string(data)}))
	}
	_, _ = w.Write(buf.Bytes())
	w.(http.Flusher).Flush()
}

// testEnv runs commands against url with captured output; stdout and
// stderr are terminals when tty is true.
type testEnv struct {
	env            *Env
	stdout, stderr *bytes.Buffer
}

func newTestEnv(url string, tty bool, extra map[string]string) *testEnv {
	te := &testEnv{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	vars := map[string]string{"SLUICE_URL": url}
	for k, v := range extra {
		vars[k] = v
	}
	te.env = &Env{
		Stdin: strings.NewReader(""), Stdout: te.stdout, Stderr: te.stderr,
		Getenv:   func(k string) string { return vars[k] },
		Terminal: func(io.Writer) (bool, int) { return tty, 100 },
		Now:      func() time.Time { return testTime.Add(3 * time.Second) },
	}
	return te
}

// run runs a command line and returns its exit code.
func (te *testEnv) run(args ...string) int {
	return Run(context.Background(), te.env, args)
}
