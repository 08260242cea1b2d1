package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := worker.LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.True(t, contracts.ValidWorkerID(cfg.WorkerID), cfg.WorkerID)
	require.Equal(t, 1, cfg.MaxConcurrent)
	require.Equal(t, 5*time.Second, cfg.HeartbeatInterval)
	require.Equal(t, 30*time.Second, cfg.StaleThreshold)
	require.Zero(t, cfg.IdleTimeout)
	require.Zero(t, cfg.MaxLifetime)
	require.Empty(t, cfg.ExecAllow)
	require.Equal(t, []string{"sleep", "exec"}, cfg.Kinds)
	require.Equal(t, 30*time.Second, cfg.ShutdownTimeout)
	require.Empty(t, cfg.HTTPAddr)
	require.Equal(t, "./.sluice", cfg.DataDir)
	require.Empty(t, cfg.Bus.URL)
	require.Equal(t, "info", cfg.Log.LogLevel)
	require.Equal(t, 10*time.Second, cfg.ClaimWait)
	require.Equal(t, 10*time.Second, cfg.DeliveryGrace)
	require.Equal(t, 5*time.Second, cfg.ExecGrace)
	require.Empty(t, cfg.FetchAllow, "inputs come from public http(s) only unless allowed")
	require.Equal(t, 5*time.Minute, cfg.FetchTimeout)

	host := limit.Capacity()
	require.Equal(t, host.CPU, cfg.CPU, "the worker's cgroup, else the machine")
	require.Equal(t, contracts.FormatMemory(host.Memory), cfg.Memory)
	require.Equal(t, host, cfg.Capacity())
	require.Empty(t, cfg.KindDefaults())
	require.Zero(t, cfg.TargetMemory, "measured backpressure is off by default")
	require.Zero(t, cfg.TargetCPU)
	require.Equal(t, time.Second, cfg.SampleInterval)
	require.Empty(t, cfg.Limits, "the strongest mechanism the host allows")

	other, err := worker.LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.NotEqual(t, cfg.WorkerID, other.WorkerID, "generated ids differ")

	def := worker.DefaultConfig()
	def.WorkerID = cfg.WorkerID
	require.Equal(t, cfg, def)
}

func TestLoadConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	cfg, err := worker.LoadConfig(map[string]string{
		"SLUICE_WORKER_ID":                   "gpu-7",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "0",
		"SLUICE_HEARTBEAT_INTERVAL":          "1s",
		"SLUICE_STALE_THRESHOLD":             "3s",
		"SLUICE_WORKER_IDLE_TIMEOUT":         "5m",
		"SLUICE_WORKER_MAX_LIFETIME":         "2h",
		"SLUICE_WORKER_EXEC_ALLOW":           "ffmpeg, /usr/bin/convert ,,",
		"SLUICE_WORKER_KINDS":                "exec",
		"SLUICE_SHUTDOWN_TIMEOUT":            "10s",
		"SLUICE_WORKER_HTTP_ADDR":            "127.0.0.1:9100",
		"SLUICE_DATA_DIR":                    "/var/lib/sluice",
		"SLUICE_NATS_URL":                    "nats://nats:4222",
		"SLUICE_LOG_LEVEL":                   "debug",
		"SLUICE_WORKER_CPU":                  "1.5",
		"SLUICE_WORKER_MEMORY":               "2GiB",
		"SLUICE_WORKER_KIND_RESOURCES":       "transcode:cpu=2,memory=1GiB; sleep:cpu=0.1 ;",
		"SLUICE_WORKER_TARGET_MEMORY":        "0.8",
		"SLUICE_WORKER_TARGET_CPU":           "0.9",
		"SLUICE_WORKER_SAMPLE_INTERVAL":      "250ms",
		"SLUICE_WORKER_LIMITS":               "rlimit",
	})
	require.NoError(t, err)
	require.Equal(t, contracts.Resources{CPU: 1.5, Memory: 2 << 30}, cfg.Capacity())
	require.Equal(t, map[string]contracts.Resources{
		"transcode": {CPU: 2, Memory: 1 << 30},
		"sleep":     {CPU: 0.1},
	}, cfg.KindDefaults())
	require.Equal(t, 0.8, cfg.TargetMemory)
	require.Equal(t, 0.9, cfg.TargetCPU)
	require.Equal(t, 250*time.Millisecond, cfg.SampleInterval)
	require.Equal(t, "rlimit", cfg.Limits)
	require.Equal(t, "gpu-7", cfg.WorkerID)
	require.Equal(t, 0, cfg.MaxConcurrent)
	require.Equal(t, time.Second, cfg.HeartbeatInterval)
	require.Equal(t, 3*time.Second, cfg.StaleThreshold)
	require.Equal(t, 5*time.Minute, cfg.IdleTimeout)
	require.Equal(t, 2*time.Hour, cfg.MaxLifetime)
	require.Equal(t, []string{"ffmpeg", "/usr/bin/convert"}, cfg.ExecAllow)
	require.Equal(t, []string{"exec"}, cfg.Kinds)
	require.Equal(t, 10*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, "127.0.0.1:9100", cfg.HTTPAddr)
	require.Equal(t, "/var/lib/sluice", cfg.DataDir)
	require.Equal(t, "nats://nats:4222", cfg.Bus.URL)
	require.Equal(t, "debug", cfg.Log.LogLevel)
}

func TestLoadConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		wantVar string
	}{
		{"bad worker id", map[string]string{"SLUICE_WORKER_ID": "a.b"}, "SLUICE_WORKER_ID"},
		{"long worker id", map[string]string{"SLUICE_WORKER_ID": strings.Repeat("w", 65)}, "SLUICE_WORKER_ID"},
		{"negative concurrency", map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "-1"}, "SLUICE_WORKER_MAX_CONCURRENT_TASKS"},
		{"concurrency not a number", map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "many"}, "SLUICE_WORKER_MAX_CONCURRENT_TASKS"},
		{"negative heartbeat", map[string]string{"SLUICE_HEARTBEAT_INTERVAL": "-1s"}, "SLUICE_HEARTBEAT_INTERVAL"},
		{"heartbeat not a duration", map[string]string{"SLUICE_HEARTBEAT_INTERVAL": "often"}, "SLUICE_HEARTBEAT_INTERVAL"},
		{"stale not above twice heartbeat", map[string]string{"SLUICE_HEARTBEAT_INTERVAL": "5s", "SLUICE_STALE_THRESHOLD": "10s"}, "SLUICE_STALE_THRESHOLD"},
		{"negative idle timeout", map[string]string{"SLUICE_WORKER_IDLE_TIMEOUT": "-1s"}, "SLUICE_WORKER_IDLE_TIMEOUT"},
		{"negative max lifetime", map[string]string{"SLUICE_WORKER_MAX_LIFETIME": "-1m"}, "SLUICE_WORKER_MAX_LIFETIME"},
		{"negative shutdown timeout", map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "-1s"}, "SLUICE_SHUTDOWN_TIMEOUT"},
		{"zero claim wait", map[string]string{"SLUICE_WORKER_CLAIM_WAIT": "0s"}, "SLUICE_WORKER_CLAIM_WAIT"},
		{"zero delivery grace", map[string]string{"SLUICE_WORKER_DELIVERY_GRACE": "0s"}, "SLUICE_WORKER_DELIVERY_GRACE"},
		{"zero exec grace", map[string]string{"SLUICE_WORKER_EXEC_GRACE": "0s"}, "SLUICE_WORKER_EXEC_GRACE"},
		{"unknown kind", map[string]string{"SLUICE_WORKER_KINDS": "sleep,shell"}, "SLUICE_WORKER_KINDS"},
		{"fetch allow bad CIDR", map[string]string{"SLUICE_WORKER_FETCH_ALLOW": "10.0.0.0/40"}, "SLUICE_WORKER_FETCH_ALLOW"},
		{"fetch allow missing root", map[string]string{"SLUICE_WORKER_FETCH_ALLOW": "/no/such/dir"}, "SLUICE_WORKER_FETCH_ALLOW"},
		{"fetch allow not a host", map[string]string{"SLUICE_WORKER_FETCH_ALLOW": "http://x/y"}, "SLUICE_WORKER_FETCH_ALLOW"},
		{"negative cpu", map[string]string{"SLUICE_WORKER_CPU": "-1"}, "SLUICE_WORKER_CPU: -1 must be a positive number of cores"},
		{"absurd cpu", map[string]string{"SLUICE_WORKER_CPU": "1e6"}, "SLUICE_WORKER_CPU: 1e+06 cores is more than 4096"},
		{"cpu not a number", map[string]string{"SLUICE_WORKER_CPU": "two"}, "SLUICE_WORKER_CPU"},
		{"memory without a known unit", map[string]string{"SLUICE_WORKER_MEMORY": "2GB"}, `SLUICE_WORKER_MEMORY: "2GB" is not an amount of memory`},
		{"zero memory", map[string]string{"SLUICE_WORKER_MEMORY": "0"}, "SLUICE_WORKER_MEMORY"},
		{"kind resources not a kind", map[string]string{"SLUICE_WORKER_KIND_RESOURCES": "Trans Code:cpu=1"}, `SLUICE_WORKER_KIND_RESOURCES: "Trans Code" is not a kind`},
		{"kind resources without a colon", map[string]string{"SLUICE_WORKER_KIND_RESOURCES": "cpu=1"}, "SLUICE_WORKER_KIND_RESOURCES"},
		{"kind resources unknown resource", map[string]string{"SLUICE_WORKER_KIND_RESOURCES": "transcode:gpu=1"}, `SLUICE_WORKER_KIND_RESOURCES: kind "transcode": "gpu" is not a resource`},
		{"kind resources negative", map[string]string{"SLUICE_WORKER_KIND_RESOURCES": "transcode:cpu=-2"}, "SLUICE_WORKER_KIND_RESOURCES"},
		{"kind resources twice", map[string]string{"SLUICE_WORKER_KIND_RESOURCES": "a:cpu=1;a:cpu=2"}, "SLUICE_WORKER_KIND_RESOURCES"},
		{"memory target above 1", map[string]string{"SLUICE_WORKER_TARGET_MEMORY": "80"}, "SLUICE_WORKER_TARGET_MEMORY: 80 must be a fraction between 0 and 1"},
		{"cpu target negative", map[string]string{"SLUICE_WORKER_TARGET_CPU": "-0.5"}, "SLUICE_WORKER_TARGET_CPU"},
		{"zero sample interval", map[string]string{"SLUICE_WORKER_SAMPLE_INTERVAL": "0s"}, "SLUICE_WORKER_SAMPLE_INTERVAL"},
		{"unknown limit mechanism", map[string]string{"SLUICE_WORKER_LIMITS": "jail"}, `SLUICE_WORKER_LIMITS: "jail" is not a mechanism`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := worker.LoadConfig(tc.env)
			require.ErrorContains(t, err, tc.wantVar)
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := testConfig(t, "w-bad")
	cfg.StaleThreshold = cfg.HeartbeatInterval
	_, err := worker.New(cfg, worker.Deps{NC: b.wnc, JS: b.wjs})
	require.ErrorContains(t, err, "SLUICE_STALE_THRESHOLD")

	_, err = worker.New(testConfig(t, "w-nil"), worker.Deps{JS: b.wjs})
	require.Error(t, err)
}

func TestHandleValidatesKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.newWorker(testConfig(t, "w-kinds"))
	require.ErrorContains(t, w.Handle("Bad Kind", echoHandler), "not a valid kind")
	require.ErrorContains(t, w.Handle("nil", nil), "nil handler")
	require.NoError(t, w.Handle("echo", echoHandler))
	require.ErrorContains(t, w.Handle("echo", echoHandler), "already registered")
	require.Equal(t, []string{"echo"}, w.Kinds())

	cfg := testConfig(t, "w-builtin")
	cfg.Kinds = []string{"sleep", "exec"}
	bw := b.newWorker(cfg)
	require.Equal(t, []string{"exec", "sleep"}, bw.Kinds())
	require.ErrorContains(t, bw.Handle("sleep", echoHandler), "already registered")
	cfg.Kinds = nil
	nw := b.newWorker(cfg)
	require.Empty(t, nw.Kinds())
}
