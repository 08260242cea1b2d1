package reaper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadConfigDerivesIntervals(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(map[string]string{"SLUICE_STALE_THRESHOLD": "3s"})
	require.NoError(t, err)
	require.Equal(t, time.Second, c.Interval)
	require.Equal(t, 168*time.Hour, c.Retention)
	require.Equal(t, 30*time.Second, c.ShutdownTimeout)
}

func TestDefaultConfigIsTheEmptyEnvironment(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, c, DefaultConfig())
	require.Equal(t, 10*time.Second, c.Interval, "a third of the 30s stale threshold")
}

func TestLoadConfigNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := map[string]map[string]string{
		"SLUICE_STALE_THRESHOLD":  {"SLUICE_STALE_THRESHOLD": "0s"},
		"SLUICE_REAPER_RETENTION": {"SLUICE_REAPER_RETENTION": "-1h"},
		"SLUICE_REAPER_MAX_BATCH": {"SLUICE_REAPER_MAX_BATCH": "0"},
		"SLUICE_MAX_RUNTIME":      {"SLUICE_MAX_RUNTIME": "-1s"},
		"SLUICE_REAPER_INTERVAL":  {"SLUICE_REAPER_INTERVAL": "often"},
		"SLUICE_SHUTDOWN_TIMEOUT": {"SLUICE_SHUTDOWN_TIMEOUT": "0s"},
	}
	for name, env := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig(env)
			require.ErrorContains(t, err, name)
		})
	}
}
