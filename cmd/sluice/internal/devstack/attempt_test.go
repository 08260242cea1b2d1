package devstack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestRetriedJobShowsItsRunAsAttemptAndItsFenceAsClaim: over plain HTTP, a
// job whose first run failed and whose second succeeded shows attempt 2
// (its run number, what max_attempts limits) and a claim above it (the
// fencing counter also counts the claim its retry was given back with),
// in the job, in its run errors and in the events that followed it.
func TestRetriedJobShowsItsRunAsAttemptAndItsFenceAsClaim(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t) // the job's marker outlives its run
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_EXEC_ALLOW":       "/bin/sh",
		"SLUICE_SCHEDULER_RETRY_BACKOFF": "100ms",
		"SLUICE_WORKER_EXEC_DIRS":        shared,
	})
	ctx := t.Context()
	events, resp := b.openSSE(ctx, "/v1/events", nil)
	require.NotNil(t, events, "status %d", resp.StatusCode)

	marker := filepath.Join(shared, "ran-once")
	body := fmt.Sprintf(`{"kind":"exec","max_attempts":3,"payload":{"argv":["/bin/sh","-c","if [ -e %[1]s ]; then exit 0; fi; touch %[1]s; exit 1"]}}`, marker)
	res, err := http.Post(b.base+"/v1/jobs", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	var submitted map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&submitted))
	res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode, "%v", submitted)
	require.EqualValues(t, 0, submitted["attempt"], "not run yet: %v", submitted)
	require.EqualValues(t, 0, submitted["claim"], "not claimed yet: %v", submitted)
	id := submitted["id"].(string)

	// The events of the job, until its final state.
	var last map[string]any
	running := 0
	for final := false; !final; {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the event stream ended before the job did")
			var fields map[string]any
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &fields), ev.Data)
			if fields["job_id"] != id || ev.Type != contracts.EventState {
				continue
			}
			require.Contains(t, fields, "claim", ev.Data)
			if fields["state"] == string(contracts.StateRunning) {
				running++
				require.EqualValues(t, running, fields["attempt"], "a running event carries its run number: %s", ev.Data)
			}
			last, final = fields, contracts.JobState(fields["state"].(string)).Final()
		case <-time.After(time.Minute):
			t.Fatal("no final state event for the job")
		}
	}
	require.Equal(t, 2, running, "two runs")

	var job map[string]any
	require.Equal(t, http.StatusOK, b.getJSON("/v1/jobs/"+id, &job))
	require.Equal(t, string(contracts.StateSucceeded), job["state"])
	require.EqualValues(t, 2, job["attempt"], "the second run: %v", job)
	require.EqualValues(t, 3, job["max_attempts"])
	claim := job["claim"].(float64)
	require.Greater(t, claim, float64(2), "the claim counts the claim the retry was given back with: %v", job)
	require.EqualValues(t, 2, job["runs"], "the deprecated alias of attempt: %v", job)

	runErrs := job["errors"].([]any)
	require.Len(t, runErrs, 1)
	first := runErrs[0].(map[string]any)
	require.EqualValues(t, 1, first["attempt"], "the first run failed: %v", first)
	require.Less(t, first["claim"].(float64), claim, "at an older claim: %v", first)

	require.Equal(t, job["attempt"], last["attempt"], "the final event: %v", last)
	require.Equal(t, job["claim"], last["claim"], "the final event: %v", last)
}
