package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func newProbe(t *testing.T) (*probe, string) {
	t.Helper()
	dir := t.TempDir()
	j, err := journal.Create(filepath.Join(dir, "w"+journal.Ext))
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	return &probe{journal: j, workerID: "w1", pid: 42, step: time.Millisecond,
		capacity: contracts.Resources{CPU: 2, Memory: 1 << 30}, log: zerolog.Nop()}, dir
}

func events(t *testing.T, dir string) []string {
	t.Helper()
	entries, bad, err := journal.ReadDir(dir)
	require.NoError(t, err)
	require.Zero(t, bad)
	var out []string
	for _, e := range entries {
		require.Equal(t, "job1", e.JobID)
		require.EqualValues(t, 3, e.Attempt)
		require.Equal(t, "w1", e.WorkerID)
		require.Equal(t, 42, e.PID)
		out = append(out, e.Event+":"+e.CtxErr)
	}
	return out
}

func TestProbeRunsAndJournals(t *testing.T) {
	t.Parallel()
	p, dir := newProbe(t)
	need := contracts.Resources{CPU: 1.5, Memory: 512 << 20}
	res, err := p.handle(context.Background(), worker.Job{ID: "job1", Claim: 3, Payload: []byte(`{"ms":5}`), Resources: need})
	require.NoError(t, err)
	require.JSONEq(t, `{"slept_ms":5}`, string(res))
	require.Equal(t, []string{"start:", "end:"}, events(t, dir))

	// The start line carries the run's need and the worker's capacity.
	entries, _, err := journal.ReadDir(dir)
	require.NoError(t, err)
	require.NotNil(t, entries[0].Need)
	require.Equal(t, need, *entries[0].Need)
	require.Equal(t, contracts.Resources{CPU: 2, Memory: 1 << 30}, *entries[0].Capacity)
	require.Nil(t, entries[1].Need, "only the start line carries them")
}

func TestProbeStopsWhenFenced(t *testing.T) {
	t.Parallel()
	p, dir := newProbe(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	fenced := errors.New("lease lost")
	time.AfterFunc(5*time.Millisecond, func() { cancel(fenced) })
	_, err := p.handle(ctx, worker.Job{ID: "job1", Claim: 3, Payload: []byte(`{"ms":60000}`)})
	require.ErrorIs(t, err, fenced)
	require.Equal(t, []string{"start:", "ctx_done:lease lost", "end:lease lost"}, events(t, dir))
}

func TestProbeBadPayload(t *testing.T) {
	t.Parallel()
	p, dir := newProbe(t)
	_, err := p.handle(context.Background(), worker.Job{ID: "job1", Claim: 3, Payload: []byte(`{"ms":-1}`)})
	var ce *contracts.ClassedError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, contracts.ClassInput, ce.Class)
	require.Empty(t, events(t, dir))
}
