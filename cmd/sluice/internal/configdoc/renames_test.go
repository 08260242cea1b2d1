package configdoc

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// load reads a service's configuration as its binary does; the former
// names found are returned apart, and cleared from the configuration so
// that two loads compare on the settings alone.
type load func(environ map[string]string) (settings any, deprecated []envconfig.Deprecation, err error)

func loader[C any](f func(map[string]string) (C, error), deprecated func(*C) *[]envconfig.Deprecation) load {
	return func(environ map[string]string) (any, []envconfig.Deprecation, error) {
		c, err := f(environ)
		d := deprecated(&c)
		found := *d
		*d = nil
		return c, found, err
	}
}

var loaders = map[string]load{
	"gateway":   loader(gateway.LoadConfig, func(c *gateway.Config) *[]envconfig.Deprecation { return &c.Deprecated }),
	"scheduler": loader(scheduler.LoadConfig, func(c *scheduler.Config) *[]envconfig.Deprecation { return &c.Deprecated }),
	"worker":    loader(worker.LoadConfig, func(c *worker.Config) *[]envconfig.Deprecation { return &c.Deprecated }),
	"reaper":    loader(reaper.LoadConfig, func(c *reaper.Config) *[]envconfig.Deprecation { return &c.Deprecated }),
}

// TestFormerNamesStillWork sets each former name of each service to a
// value other than the default and loads the service's configuration: it
// must equal the one the new name gives, with one warning naming the new
// variable. Then both names at once: the new one wins, and the warning
// says the former was ignored.
func TestFormerNamesStillWork(t *testing.T) {
	t.Parallel()
	pinRoot := t.TempDir()
	// A value for each renamed variable that differs from its default
	// and passes Validate; extra holds what it needs beside it.
	values := map[string]struct {
		value, other string
		extra        map[string]string
	}{
		"SLUICE_GATEWAY_HTTP_ADDR":                    {"127.0.0.1:9090", "127.0.0.1:9091", nil},
		"SLUICE_GATEWAY_MAX_ACTIVE":                   {"77", "78", nil},
		"SLUICE_GATEWAY_MAX_ACTIVE_PER_TENANT":        {"7", "8", nil},
		"SLUICE_GATEWAY_TENANT_WEIGHTS":               {"acme:3", "acme:4", nil},
		"SLUICE_GATEWAY_API_TOKENS":                   {"acme:token-1", "acme:token-2", nil},
		"SLUICE_GATEWAY_OPERATOR_TENANTS":             {"acme", "ops", map[string]string{"SLUICE_GATEWAY_API_TOKENS": "acme:t1,ops:t2"}},
		"SLUICE_GATEWAY_DISPATCH_DEADLINE":            {"3m", "4m", nil},
		"SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS":         {"5", "6", nil},
		"SLUICE_GATEWAY_DEFAULT_STALL_TIMEOUT":        {"1m", "2m", nil},
		"SLUICE_GATEWAY_RETRY_AFTER":                  {"5s", "6s", nil},
		"SLUICE_GATEWAY_MAX_BODY_BYTES":               {"4096", "8192", nil},
		"SLUICE_GATEWAY_MAX_BATCH_BYTES":              {"4096", "8192", nil},
		"SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST":        {"50", "60", nil},
		"SLUICE_GATEWAY_MAX_ITEMS_PER_TENANT":         {"500", "600", nil},
		"SLUICE_GATEWAY_KINDS":                        {"sleep", "exec", nil},
		"SLUICE_GATEWAY_MAX_STREAMS":                  {"300", "400", nil},
		"SLUICE_GATEWAY_MAX_STREAMS_PER_TENANT":       {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT":            {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST":      {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ":       {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST": {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_IP":                {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST":          {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_SHARE":             {"1s", "2s", nil},
		"SLUICE_GATEWAY_TRUSTED_PROXIES":              {"10.0.0.0/8", "192.168.0.0/16", nil},
		"SLUICE_GATEWAY_PIN_ROOTS":                    {pinRoot, t.TempDir(), nil},
		"SLUICE_GATEWAY_MAX_PIN_BYTES":                {"4096", "8192", nil},
		"SLUICE_SCHEDULER_REOFFER_INTERVAL":           {"5s", "6s", nil},
		"SLUICE_SCHEDULER_RETRY_BACKOFF":              {"3s", "4s", nil},
		"SLUICE_SCHEDULER_MAX_RETRY_BACKOFF":          {"5m", "6m", nil},
		"SLUICE_SCHEDULER_OFFER_TIMEOUT":              {"2s", "3s", nil},
		"SLUICE_SCHEDULER_CLAIM_TTL":                  {"40s", "50s", nil},
		"SLUICE_SCHEDULER_ACK_WAIT":                   {"40s", "50s", nil},
		"SLUICE_SCHEDULER_MAX_CONCURRENT":             {"8", "9", nil},
		"SLUICE_SCHEDULER_NO_WORKER_GRACE":            {"2m", "3m", nil},
		"SLUICE_SCHEDULER_SPAWN":                      {"dev", "command", map[string]string{"SLUICE_SCHEDULER_SPAWN_COMMAND": "/bin/true"}},
		"SLUICE_SCHEDULER_SPAWN_COMMAND":              {"/bin/true x", "/bin/true y", nil},
		"SLUICE_SCHEDULER_SPAWN_COOLDOWN":             {"20s", "30s", nil},
		"SLUICE_SCHEDULER_MAX_SPAWNED":                {"9", "10", nil},
		"SLUICE_SCHEDULER_SPAWN_TIMEOUT":              {"20s", "25s", nil},
		"SLUICE_SCHEDULER_MIN_WORKER_VERSION":         {"0.11.0", "0.12.0", nil},
		"SLUICE_WORKER_MAX_CONCURRENT":                {"4", "5", nil},
		"SLUICE_WORKER_HEARTBEAT_INTERVAL":            {"2s", "3s", nil},
		"SLUICE_WORKER_MAX_CACHE_BYTES":               {"4096", "8192", nil},
		"SLUICE_WORKER_MAX_SCRATCH_BYTES":             {"4096", "8192", nil},
		"SLUICE_REAPER_RETENTION":                     {"24h", "48h", nil},
		"SLUICE_REAPER_MAX_BATCH":                     {"50", "60", nil},
	}
	// base keeps what a load would generate anew (the worker's id) fixed.
	base := map[string]string{"SLUICE_WORKER_ID": "w-1"}
	env := func(kv ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range append([]map[string]string{base}, kv...) {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	covered := 0
	for _, s := range Services {
		load := loaders[s.Name]
		for _, r := range envconfig.Renames(s.Config) {
			v, ok := values[r.New]
			require.True(t, ok, "no test value for %s (former %s): add one", r.New, r.Old)
			covered++
			t.Run(s.Name+"/"+r.Old, func(t *testing.T) {
				t.Parallel()
				defaults, _, err := load(env(v.extra))
				require.NoError(t, err)
				byNew, warned, err := load(env(v.extra, map[string]string{r.New: v.value}))
				require.NoError(t, err)
				require.Empty(t, warned)
				require.False(t, reflect.DeepEqual(defaults, byNew), "%s=%s changes nothing: pick another test value", r.New, v.value)

				byOld, warned, err := load(env(v.extra, map[string]string{r.Old: v.value}))
				require.NoError(t, err)
				require.Equal(t, byNew, byOld, "%s is not read as %s", r.Old, r.New)
				require.Equal(t, []envconfig.Deprecation{{Old: r.Old, New: r.New}}, warned)
				require.Contains(t, warned[0].Message(), r.New)

				byOther, _, err := load(env(v.extra, map[string]string{r.New: v.other}))
				require.NoError(t, err)
				both, warned, err := load(env(v.extra, map[string]string{r.Old: v.value, r.New: v.other}))
				require.NoError(t, err)
				require.Equal(t, byOther, both, "with both set, %s must win", r.New)
				require.Equal(t, []envconfig.Deprecation{{Old: r.Old, New: r.New, Ignored: true}}, warned)
			})
		}
	}
	require.Len(t, values, covered, "a test value names no renamed variable")
}

// TestFormerNameErrorsNameBoth: a bad value given under a former name is
// refused with an error naming the variable and the former name it was
// read from.
func TestFormerNameErrorsNameBoth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		service, old, value, new string
	}{
		{"gateway", "SLUICE_MAX_ACTIVE", "-1", "SLUICE_GATEWAY_MAX_ACTIVE"},
		{"gateway", "SLUICE_RETRY_INTERVAL", "soon", "SLUICE_GATEWAY_RETRY_AFTER"},
		{"scheduler", "SLUICE_SCHEDULER_CONCURRENCY", "0", "SLUICE_SCHEDULER_MAX_CONCURRENT"},
		{"scheduler", "SLUICE_RETRY_INTERVAL", "0s", "SLUICE_SCHEDULER_REOFFER_INTERVAL"},
		{"worker", "SLUICE_HEARTBEAT_INTERVAL", "often", "SLUICE_WORKER_HEARTBEAT_INTERVAL"},
		{"reaper", "SLUICE_REAPER_BATCH", "0", "SLUICE_REAPER_MAX_BATCH"},
	} {
		t.Run(tc.service+"/"+tc.old, func(t *testing.T) {
			t.Parallel()
			_, _, err := loaders[tc.service](map[string]string{tc.old: tc.value})
			require.ErrorContains(t, err, tc.new+": ")
			require.ErrorContains(t, err, tc.new+" was read from its former name "+tc.old)
		})
	}
}
