package kinds_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseSleepPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    time.Duration
		wantErr string
	}{
		{"missing", "", 0, ""},
		{"null", "null", 0, ""},
		{"spaces around null", "  null \n", 0, ""},
		{"empty object", "{}", 0, ""},
		{"zero", `{"ms":0}`, 0, ""},
		{"some", `{"ms":250}`, 250 * time.Millisecond, ""},
		{"null ms", `{"ms":null}`, 0, ""},
		{"one day", `{"ms":86400000}`, 24 * time.Hour, ""},
		{"more than a day", `{"ms":86400001}`, 0, "between 0 and"},
		{"negative", `{"ms":-1}`, 0, "between 0 and"},
		{"fraction", `{"ms":1.5}`, 0, "payload.ms: expected an integer, got 1.5"},
		{"string", `{"ms":"10"}`, 0, "payload.ms: expected an integer, got a string"},
		{"unknown field", `{"ms":1,"extra":true}`, 0, "unknown field"},
		{"trailing data", `{"ms":1} {}`, 0, "trailing data"},
		{"trailing garbage", `{"ms":1}x`, 0, "trailing data"},
		{"array", `[1]`, 0, "JSON object"},
		{"number", `5`, 0, "JSON object"},
		{"broken", `{"ms":`, 0, "not valid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := kinds.ParseSleepPayload([]byte(tc.payload))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseSleepPayload(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"ms":0}`, `{"ms":86400000}`, `{"ms":-5}`,
		`{"ms":1e3}`, `{"ms":1,"x":2}`, `{"ms":1}{}`, `[]`, `"ms"`, `{"ms":99999999999999999999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := kinds.ParseSleepPayload(data)
		if err != nil {
			require.Zero(t, d)
			return
		}
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, time.Duration(kinds.MaxSleepMS)*time.Millisecond)
	})
}

func TestRunSleep(t *testing.T) {
	t.Parallel()
	t.Run("sleeps and reports", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		out, err := kinds.RunSleep(context.Background(), []byte(`{"ms":30}`))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
		require.JSONEq(t, `{"slept_ms":30}`, string(out))
	})
	t.Run("no payload", func(t *testing.T) {
		t.Parallel()
		out, err := kinds.RunSleep(context.Background(), nil)
		require.NoError(t, err)
		require.JSONEq(t, `{"slept_ms":0}`, string(out))
	})
	t.Run("bad payload is an input error", func(t *testing.T) {
		t.Parallel()
		_, err := kinds.RunSleep(context.Background(), []byte(`{"ms":-1}`))
		var ce *contracts.ClassedError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, contracts.ClassInput, ce.Class)
	})
	t.Run("honours cancellation", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := kinds.RunSleep(ctx, []byte(`{"ms":60000}`))
			done <- err
		}()
		cancel()
		select {
		case err := <-done:
			require.True(t, errors.Is(err, context.Canceled), "got %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("sleep did not stop on cancel")
		}
	})
}

func TestRunSleepReportsProgress(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got []contracts.Progress
	)
	th := progress.NewThrottle(time.Nanosecond, func(p contracts.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}, nil)
	defer th.Stop()
	_, err := kinds.RunSleep(progress.With(t.Context(), th), json.RawMessage(`{"ms":400}`))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(got), 5, "a 400 ms sleep reports in steps")
	require.Zero(t, got[0].Percent)
	for i := 1; i < len(got); i++ {
		require.GreaterOrEqual(t, got[i].Percent, got[i-1].Percent, "progress goes forward")
		require.LessOrEqual(t, got[i].Percent, 100.0)
	}

	// A short sleep reports nothing.
	got = nil
	mu.Unlock()
	_, err = kinds.RunSleep(progress.With(t.Context(), th), json.RawMessage(`{"ms":20}`))
	mu.Lock()
	require.NoError(t, err)
	require.Empty(t, got)
}
