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
	require.Equal(t, 5*time.Second, c.ProgressFlush)
	require.Equal(t, "./.sluice", c.Store.DataDir)
}

func TestLoadConfigNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := map[string]map[string]string{
		"SLUICE_RETRY_INTERVAL":           {"SLUICE_RETRY_INTERVAL": "0s"},
		"SLUICE_STALE_THRESHOLD":          {"SLUICE_STALE_THRESHOLD": "-1s"},
		"SLUICE_SCHEDULER_MAX_CONCURRENT": {"SLUICE_SCHEDULER_MAX_CONCURRENT": "0"},
		"SLUICE_SCHEDULER_CLAIM_TTL":      {"SLUICE_SCHEDULER_CLAIM_TTL": "0s"},
		"SLUICE_MAX_RUNTIME":              {"SLUICE_MAX_RUNTIME": "-5m"},
		"SLUICE_SCHEDULER_PROGRESS_FLUSH": {"SLUICE_SCHEDULER_PROGRESS_FLUSH": "-1s"},
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

func TestLeaseRenewPoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want time.Duration // the renew point in effect
		err  string        // the variable the error names
	}{
		{name: "default: 2/3 of the stale threshold", env: map[string]string{}, want: 20 * time.Second},
		{name: "default bounded by two heartbeats before stale",
			env: map[string]string{"SLUICE_STALE_THRESHOLD": "30s", "SLUICE_HEARTBEAT_INTERVAL": "14s"}, want: 2 * time.Second},
		{name: "set", env: map[string]string{"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": "10s"}, want: 10 * time.Second},
		{name: "at the bound", env: map[string]string{"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": "20s"}, want: 20 * time.Second},
		{name: "past the bound", env: map[string]string{"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": "21s"}, err: "SLUICE_SCHEDULER_LEASE_RENEW_AFTER"},
		{name: "past the bound of a longer interval",
			env: map[string]string{"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": "10s", "SLUICE_HEARTBEAT_INTERVAL": "11s"}, err: "SLUICE_SCHEDULER_LEASE_RENEW_AFTER"},
		{name: "negative", env: map[string]string{"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": "-1s"}, err: "SLUICE_SCHEDULER_LEASE_RENEW_AFTER"},
		{name: "interval not positive", env: map[string]string{"SLUICE_HEARTBEAT_INTERVAL": "0s"}, err: "SLUICE_HEARTBEAT_INTERVAL"},
		{name: "stale threshold within two intervals",
			env: map[string]string{"SLUICE_STALE_THRESHOLD": "10s", "SLUICE_HEARTBEAT_INTERVAL": "5s"}, err: "SLUICE_STALE_THRESHOLD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadConfig(tt.env)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, c.RenewAfter())
		})
	}
}
