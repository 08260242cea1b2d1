package observe_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/observe"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines decodes every JSON log line written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

func TestNewLoggerLevels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		level string
		want  zerolog.Level
		logs  []string // the levels that come through
	}{
		{"debug", zerolog.DebugLevel, []string{"debug", "info", "warn", "error"}},
		{"info", zerolog.InfoLevel, []string{"info", "warn", "error"}},
		{"warn", zerolog.WarnLevel, []string{"warn", "error"}},
		{"error", zerolog.ErrorLevel, []string{"error"}},
		{"WARN", zerolog.WarnLevel, []string{"warn", "error"}},
		{"Debug", zerolog.DebugLevel, []string{"debug", "info", "warn", "error"}},
		{"", zerolog.InfoLevel, []string{"info", "warn", "error"}},
		{"verbose", zerolog.InfoLevel, []string{"info", "warn", "error"}},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			t.Parallel()
			var buf syncBuffer
			log := observe.NewLogger("svc", &buf, tt.level, "json")
			assert.Equal(t, tt.want, log.GetLevel())
			log.Debug().Msg("debug")
			log.Info().Msg("info")
			log.Warn().Msg("warn")
			log.Error().Msg("error")
			var got []string
			for _, l := range buf.lines(t) {
				assert.Equal(t, l["message"], l["level"], "level of %v", l)
				got = append(got, l["message"].(string))
			}
			assert.Equal(t, tt.logs, got)
		})
	}
}

func TestNewLoggerFields(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	log := observe.NewLogger("scheduler", &buf, "info", "")
	log.Info().Str(observe.FieldJobID, "j1").Str(observe.FieldWorkerID, "w1").Int(observe.FieldAttempt, 2).Int64(observe.FieldClaim, 5).
		Str(observe.FieldSubject, "sluice.jobs.due").Str(observe.FieldTenant, "acme").Msg("dispatched")
	lines := buf.lines(t)
	require.Len(t, lines, 1)
	l := lines[0]
	assert.Equal(t, "scheduler", l["service"])
	assert.Equal(t, "info", l["level"])
	assert.Equal(t, "dispatched", l["message"])
	assert.NotEmpty(t, l["time"])
	assert.Equal(t, "j1", l["job_id"])
	assert.Equal(t, "w1", l["worker_id"])
	assert.InDelta(t, 2, l["attempt"], 0)
	assert.InDelta(t, 5, l["claim"], 0)
	assert.Equal(t, "sluice.jobs.due", l["subject"])
	assert.Equal(t, "acme", l["tenant"])
}

func TestNewLoggerConsole(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"console", "CONSOLE"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			var buf syncBuffer
			log := observe.NewLogger("gateway", &buf, "debug", format)
			log.Debug().Str(observe.FieldJobID, "j1").Msg("hello there")
			out := buf.String()
			assert.False(t, strings.HasPrefix(out, "{"), "console output looks like JSON: %q", out)
			assert.Contains(t, out, "hello there")
			assert.Contains(t, out, "service=")
			assert.Contains(t, out, "gateway")
			assert.Contains(t, out, "j1")
		})
	}
}

func TestNewLoggerNilWriter(t *testing.T) {
	t.Parallel()
	// A nil writer means stderr; at error level nothing is written here.
	log := observe.NewLogger("svc", nil, "error", "")
	assert.Equal(t, zerolog.ErrorLevel, log.GetLevel())
	log.Info().Msg("not shown")
}
