package service

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int64
	}{
		{"unset: the default", map[string]string{}, DefaultMemoryLimit},
		{"other variables only", map[string]string{"GOGC": "50"}, DefaultMemoryLimit},
		{"set: the runtime's", map[string]string{"GOMEMLIMIT": "256MiB"}, 0},
		{"off: none", map[string]string{"GOMEMLIMIT": "off"}, 0},
		{"set empty: the runtime's", map[string]string{"GOMEMLIMIT": ""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := memoryLimit(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			require.Equal(t, tc.want, got)
		})
	}
}

// TestApplyMemoryLimit runs alone (no t.Parallel): it sets the process's
// limit and puts the previous one back.
func TestApplyMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // restored after the test
	require.NoError(t, os.Unsetenv("GOMEMLIMIT"))
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	require.Equal(t, int64(DefaultMemoryLimit), applyMemoryLimit())
	require.Equal(t, int64(DefaultMemoryLimit), debug.SetMemoryLimit(-1))
}
