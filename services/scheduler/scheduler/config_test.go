package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, "2s", c.ReofferInterval.String())
	require.Equal(t, "30s", c.StaleThreshold.String())
	require.Equal(t, 64, c.MaxConcurrent)
	require.Equal(t, "./.sluice", c.Store.DataDir)
}

func TestLoadConfigNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := map[string]map[string]string{
		"SLUICE_RETRY_INTERVAL":           {"SLUICE_RETRY_INTERVAL": "0s"},
		"SLUICE_STALE_THRESHOLD":          {"SLUICE_STALE_THRESHOLD": "-1s"},
		"SLUICE_SCHEDULER_MAX_CONCURRENT": {"SLUICE_SCHEDULER_MAX_CONCURRENT": "0"},
		"SLUICE_SCHEDULER_CLAIM_TTL":      {"SLUICE_SCHEDULER_CLAIM_TTL": "1s", "SLUICE_SCHEDULER_OFFER_TIMEOUT": "1s"},
		"SLUICE_MAX_RUNTIME":              {"SLUICE_MAX_RUNTIME": "-5m"},
		"SLUICE_STORE":                    {"SLUICE_STORE": "postgres://x"},
		"SLUICE_SCHEDULER_OFFER_TIMEOUT":  {"SLUICE_SCHEDULER_OFFER_TIMEOUT": "soon"},
	}
	for name, env := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig(env)
			require.ErrorContains(t, err, name)
		})
	}
}

func TestDefaultConfigIsTheEmptyEnvironment(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, c, DefaultConfig())
	require.Equal(t, 30*time.Second, c.ShutdownTimeout)
}
