package apply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestProgressRecordedOnlyForTheRunningAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	ctx := context.Background()
	p := contracts.Progress{Percent: 40, Stage: "copy", Message: "4 of 10"}

	b.a.Progress(ctx, enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w1", Progress: p}))
	got := b.get("j1")
	require.Equal(t, &p, got.Progress)
	require.Equal(t, contracts.StateRunning, got.State)

	// Another worker, an old attempt, an unknown job, a malformed report:
	// nothing changes.
	other := contracts.Progress{Percent: 99}
	for _, rep := range [][]byte{
		enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w2", Progress: other}),
		enc(t, contracts.ProgressReport{JobID: "j1", Claim: 2, WorkerID: "w1", Progress: other}),
		enc(t, contracts.ProgressReport{JobID: "nope", Claim: 1, WorkerID: "w1", Progress: other}),
		[]byte(`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":250}}`),
		[]byte(`not json`),
	} {
		b.a.Progress(ctx, rep)
	}
	require.Equal(t, &p, b.get("j1").Progress)

	// A finished job takes no more progress.
	res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}
	b.a.Result(ctx, enc(t, res), nil)
	b.a.Progress(ctx, enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w1", Progress: other}))
	require.Equal(t, &p, b.get("j1").Progress)
}
