package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Submit a job and wait for it, printing its progress. (The gateway here is
// a stand-in that answers as a real one would; point New at yours, e.g.
// http://127.0.0.1:8080 under `make run`.)
func Example() {
	gateway := httptest.NewServer(standIn())
	defer gateway.Close()

	c, err := client.New(gateway.URL, client.WithToken("my-token"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	job, created, err := c.Submit(ctx, contracts.SubmitRequest{Kind: "resize", Payload: json.RawMessage(`{"w":640}`)})
	if err != nil {
		panic(err) // errors.Is(err, client.ErrRejected) on a 429: retry after err.(*client.Error).RetryAfter
	}
	fmt.Println("submitted:", created, job.State)
	final, err := c.Wait(ctx, job.ID, func(ev contracts.Event) {
		if ev.Type == contracts.EventProgress {
			fmt.Printf("progress: %.0f%%\n", ev.Progress.Percent)
		}
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("final:", final.State, string(final.Result))
	// Output:
	// submitted: true pending
	// progress: 50%
	// final: succeeded {"width":640}
}

// standIn answers a submit, one job's event stream and the finished job.
func standIn() http.Handler {
	base := contracts.Job{ID: "01a2", Tenant: "acme", Kind: "resize", MaxAttempts: 3}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		j := base
		j.State = contracts.StatePending
		writeJSON(w, http.StatusAccepted, j)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		running := base
		running.State, running.Attempt, running.Claim = contracts.StateRunning, 1, 1
		progress := contracts.Event{Type: contracts.EventProgress, JobID: base.ID, Tenant: base.Tenant, Attempt: 1, Claim: 1, Progress: &contracts.Progress{Percent: 50}}
		done := contracts.StateEvent(running)
		done.State = contracts.StateSucceeded
		writeEvents(w,
			sse.Event{ID: "1", Type: contracts.EventSnapshot, Data: data(running)},
			sse.Event{ID: "2", Type: contracts.EventProgress, Data: data(progress)},
			sse.Event{ID: "3", Type: contracts.EventState, Data: data(done)})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		j := base
		j.State, j.Result = contracts.StateSucceeded, json.RawMessage(`{"width":640}`)
		writeJSON(w, http.StatusOK, j)
	})
	return mux
}
