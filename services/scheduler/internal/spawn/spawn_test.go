package spawn

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// fakes are the spawner's dependencies, set by the test.
type fakes struct {
	mu      sync.Mutex
	ready   map[string]int
	room    map[string]int
	workers []contracts.WorkerInfo
	sent    []contracts.ScaleRequest
}

func (f *fakes) PendingKinds(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.ready {
		out = append(out, k)
	}
	return out, nil
}

func (f *fakes) Backlog(_ context.Context, kind string, now time.Time, _ int) (int, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready[kind], now.Add(-3 * time.Second), nil
}

func (f *fakes) Room() map[string]int { f.mu.Lock(); defer f.mu.Unlock(); return f.room }

func (f *fakes) Workers() []contracts.WorkerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workers
}

func (f *fakes) Publish(_ string, data []byte) error {
	var r contracts.ScaleRequest
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	f.mu.Lock()
	f.sent = append(f.sent, r)
	f.mu.Unlock()
	return nil
}

// TestSpawnerAsksWithinItsBounds: a kind with ready jobs and no free slot
// gets one request per cooldown; a kind with room gets none; requests not
// answered yet count against the maximum with the live spawned workers.
func TestSpawnerAsksWithinItsBounds(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	f := &fakes{ready: map[string]int{"sleep": 5, "busy": 2}, room: map[string]int{"busy": 3}}
	s := New(Config{Cooldown: 10 * time.Second, Max: 2, Timeout: time.Minute}, f, f, f, f, clock.Now, zerolog.Nop(), metrics.New(nil))
	ctx := t.Context()

	got, err := s.Check(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "sleep", got[0].Kind, "a kind with free slots needs no worker")
	require.Equal(t, 5, got[0].Ready)
	require.Equal(t, int64(3000), got[0].OldestWaitMS)
	require.Equal(t, got, f.sent, "published")

	got, _ = s.Check(ctx)
	require.Empty(t, got, "within the cooldown")
	clock.Advance(10 * time.Second)
	got, _ = s.Check(ctx)
	require.Len(t, got, 1, "after the cooldown, one more")
	clock.Advance(10 * time.Second)
	got, _ = s.Check(ctx)
	require.Empty(t, got, "two asked for, none answered yet: at the maximum")

	// One spawned worker comes: it answers a request; it is live.
	f.mu.Lock()
	f.workers = []contracts.WorkerInfo{{ID: "spawned-01", Spawned: true}, {ID: "other"}}
	f.mu.Unlock()
	clock.Advance(10 * time.Second)
	got, _ = s.Check(ctx)
	require.Empty(t, got, "one live, one still asked for")
	// The other request is given up after the timeout: room for one more.
	clock.Advance(time.Minute)
	got, _ = s.Check(ctx)
	require.Len(t, got, 1)
	require.Equal(t, 1, got[0].Live)

	// Nothing ready: nothing asked, and the turn is not spent.
	f.mu.Lock()
	f.ready = map[string]int{"delayed": 0}
	f.mu.Unlock()
	clock.Advance(time.Minute)
	got, _ = s.Check(ctx)
	require.Empty(t, got)
}

// TestSpawnerRunsTheCommand: in command mode each request runs the command
// with the request in its environment, one at a time per kind.
func TestSpawnerRunsTheCommand(t *testing.T) {
	t.Parallel()
	out := t.TempDir() + "/spawned"
	f := &fakes{ready: map[string]int{"sleep": 3}}
	s := New(Config{Mode: ModeCommand, Command: []string{"/bin/sh", "-c", `echo "$SLUICE_SCALE_KIND $SLUICE_SCALE_READY" >> ` + out},
		Max: 4, Timeout: 5 * time.Second}, f, f, f, f, time.Now, zerolog.Nop(), metrics.New(nil))
	got, err := s.Check(t.Context())
	require.NoError(t, err)
	require.Len(t, got, 1)
	s.commands.Wait()
	data, err := readFile(out)
	require.NoError(t, err)
	require.Equal(t, "sleep 3\n", data)
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// TestCommandSpawnerWaitsOneTimeoutAfterStart: a scheduler that runs spawn
// commands asks for nothing during its first spawn timeout, so that what
// it asked for before a restart counts against the bound.
func TestCommandSpawnerWaitsOneTimeoutAfterStart(t *testing.T) {
	t.Parallel()
	f := &fakes{ready: map[string]int{"sleep": 3}}
	const timeout = 300 * time.Millisecond
	s := New(Config{Mode: ModeCommand, Command: []string{"/bin/true"}, Max: 1, Timeout: timeout, Interval: 10 * time.Millisecond},
		f, f, f, f, time.Now, zerolog.Nop(), metrics.New(nil))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.sent) == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), timeout, "asked before one spawn timeout had passed")
	cancel()
	require.NoError(t, <-done)
}
