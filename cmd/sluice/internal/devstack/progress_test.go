package devstack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// TestProgressLiveInEventsStoredWithTheEnd: a job's progress reports
// reach its event stream as they come, but are not written one by one:
// with a flush period longer than the job, GET /v1/jobs/{id} shows no
// progress while it runs, and once it finished it shows the last
// progress its events carried, stored by the result's write (no
// transition written for any report).
func TestProgressLiveInEventsStoredWithTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_PROGRESS_INTERVAL": "50ms",
		"SLUICE_SCHEDULER_PROGRESS_FLUSH": "1h",
	})
	wc, ok := b.stack.Store.(store.WriteCounter)
	require.True(t, ok)
	before := wc.WriteCounts()
	job := b.mustSubmit("sleep", map[string]int{"ms": 1500})

	ch, resp := b.openSSE(t.Context(), "/v1/jobs/"+job.ID+"/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)
	var progress []contracts.Progress
	deadline := time.After(30 * time.Second)
	for len(progress) == 0 {
		select {
		case ev, open := <-ch:
			require.True(t, open, "the stream ended before any progress")
			if ev.Type == contracts.EventProgress {
				progress = append(progress, *decodeEvent(t, ev).Progress)
			}
		case <-deadline:
			t.Fatal("no progress event")
		}
	}
	running := b.job(job.ID)
	require.Equal(t, contracts.StateRunning, running.State)
	require.Nil(t, running.Progress, "the event is live; the store has it at the next flush")

	var states []contracts.JobState
	for _, ev := range readAll(t, ch, 30*time.Second) {
		switch e := decodeEvent(t, ev); e.Type {
		case contracts.EventProgress:
			progress = append(progress, *e.Progress)
		case contracts.EventState:
			states = append(states, e.State)
		}
	}
	require.NotEmpty(t, states)
	require.Equal(t, contracts.StateSucceeded, states[len(states)-1])
	require.Greater(t, len(progress), 3, "a 1.5 s sleep reports progress many times")

	final := b.job(job.ID)
	require.Equal(t, contracts.StateSucceeded, final.State)
	require.NotNil(t, final.Progress, "the last progress is stored with the end")
	require.Equal(t, "sleeping", final.Progress.Stage)
	require.GreaterOrEqual(t, final.Progress.Percent, progress[len(progress)-1].Percent,
		"the job shows its last progress event (%+v), not an older one: %+v", progress[len(progress)-1], *final.Progress)
	wrote := wc.WriteCounts().Sub(before)
	require.Zero(t, wrote.Writes[store.WriteTransition], "no report written on its own: %+v", wrote.Writes)
}
