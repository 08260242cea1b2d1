package configdoc

import (
	"reflect"
	"testing"
	"time"

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
	// A value for each renamed variable that differs from its default
	// and passes Validate; extra holds what it needs beside it.
	values := map[string]struct {
		value, other string
		extra        map[string]string
	}{
		"SLUICE_GATEWAY_TENANT_WEIGHTS":               {"acme:3", "acme:4", nil},
		"SLUICE_GATEWAY_OPERATOR_TENANTS":             {"acme", "ops", map[string]string{"SLUICE_API_TOKENS": "acme:t1,ops:t2"}},
		"SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS":         {"5", "6", nil},
		"SLUICE_GATEWAY_DEFAULT_STALL_TIMEOUT":        {"1m", "2m", nil},
		"SLUICE_GATEWAY_RETRY_AFTER":                  {"5s", "6s", nil},
		"SLUICE_GATEWAY_MAX_BODY_BYTES":               {"4096", "8192", nil},
		"SLUICE_GATEWAY_MAX_BATCH_BYTES":              {"4096", "8192", nil},
		"SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST":        {"50", "60", nil},
		"SLUICE_GATEWAY_TENANT_MAX_ITEMS":             {"500", "600", nil},
		"SLUICE_GATEWAY_KINDS":                        {"sleep", "exec", nil},
		"SLUICE_GATEWAY_MAX_STREAMS":                  {"300", "400", nil},
		"SLUICE_GATEWAY_TENANT_MAX_STREAMS":           {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT":            {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST":      {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ":       {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST": {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_IP":                {"10", "20", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST":          {"30", "40", nil},
		"SLUICE_GATEWAY_RATE_LIMIT_SHARE":             {"1s", "2s", nil},
		"SLUICE_GATEWAY_TRUSTED_PROXIES":              {"10.0.0.0/8", "192.168.0.0/16", nil},
		"SLUICE_GATEWAY_MAX_PIN_BYTES":                {"4096", "8192", nil},
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
				require.Equal(t, []envconfig.Deprecation{{Old: r.Old, New: r.New, Now: r.Now}}, warned)
				require.Contains(t, warned[0].Message(), r.New)

				byOther, _, err := load(env(v.extra, map[string]string{r.New: v.other}))
				require.NoError(t, err)
				both, warned, err := load(env(v.extra, map[string]string{r.Old: v.value, r.New: v.other}))
				require.NoError(t, err)
				require.Equal(t, byOther, both, "with both set, %s must win", r.New)
				if r.Now != "" {
					// Another service's variable now: set for it, and no warning here.
					require.Empty(t, warned)
					return
				}
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
		{"gateway", "SLUICE_TENANT_MAX_ITEMS", "-1", "SLUICE_GATEWAY_TENANT_MAX_ITEMS"},
		{"gateway", "SLUICE_RETRY_INTERVAL", "soon", "SLUICE_GATEWAY_RETRY_AFTER"},
		{"scheduler", "SLUICE_SCHEDULER_CONCURRENCY", "0", "SLUICE_SCHEDULER_MAX_CONCURRENT"},
		{"scheduler", "SLUICE_RETRY_BACKOFF", "soon", "SLUICE_SCHEDULER_RETRY_BACKOFF"},
		{"worker", "SLUICE_WORKER_CACHE_BYTES", "many", "SLUICE_WORKER_MAX_CACHE_BYTES"},
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

// TestContractNamesDrawNoWarning: each name the design fixes is read, by
// every service that reads it, as the variable it is, with no warning of
// a former name.
func TestContractNamesDrawNoWarning(t *testing.T) {
	t.Parallel()
	values := map[string]string{
		"SLUICE_MAX_ACTIVE":                  "77",
		"SLUICE_TENANT_MAX_ACTIVE":           "7",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
		"SLUICE_RETRY_INTERVAL":              "5s",
		"SLUICE_DISPATCH_DEADLINE":           "3m",
		"SLUICE_STALE_THRESHOLD":             "40s",
		"SLUICE_HEARTBEAT_INTERVAL":          "2s",
		"SLUICE_WORKER_IDLE_TIMEOUT":         "1m",
		"SLUICE_WORKER_MAX_LIFETIME":         "1h",
		"SLUICE_NATS_URL":                    "nats://127.0.0.1:4333",
		"SLUICE_STORE":                       "mongodb://127.0.0.1:27017/sluice",
		"SLUICE_DATA_DIR":                    t.TempDir(),
		"SLUICE_HTTP_ADDR":                   "127.0.0.1:9090",
		"SLUICE_API_TOKENS":                  "acme:token-1",
		"SLUICE_PIN_ROOTS":                   t.TempDir(),
		"SLUICE_WORKER_FETCH_ALLOW":          "files.internal.example",
	}
	require.Len(t, values, len(Fixed))
	readers := Readers()
	base := map[string]string{"SLUICE_WORKER_ID": "w-1"}
	for _, name := range Fixed {
		require.NotEmpty(t, readers[name], "%s: no service reads it", name)
		for _, svc := range readers[name] {
			t.Run(svc+"/"+name, func(t *testing.T) {
				t.Parallel()
				defaults, _, err := loaders[svc](base)
				require.NoError(t, err)
				got, warned, err := loaders[svc](map[string]string{"SLUICE_WORKER_ID": "w-1", name: values[name]})
				require.NoError(t, err)
				require.Empty(t, warned, "%s is a current name of the %s", name, svc)
				require.False(t, reflect.DeepEqual(defaults, got), "%s=%s is not read by the %s", name, values[name], svc)
			})
		}
	}
}

// TestRetryIntervalIsTheSchedulers: SLUICE_RETRY_INTERVAL sets the
// scheduler's re-offer period. The gateway, which took its Retry-After
// hint from it before, still does while SLUICE_GATEWAY_RETRY_AFTER is
// unset, with a warning that says what the variable sets now and names
// the new one; once SLUICE_GATEWAY_RETRY_AFTER is set, it says nothing.
func TestRetryIntervalIsTheSchedulers(t *testing.T) {
	t.Parallel()
	s, err := scheduler.LoadConfig(map[string]string{"SLUICE_RETRY_INTERVAL": "7s"})
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, s.ReofferInterval)
	require.Empty(t, s.Deprecated)

	g, err := gateway.LoadConfig(map[string]string{"SLUICE_RETRY_INTERVAL": "7s"})
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, g.RetryAfter, "honoured for one release")
	require.Len(t, g.Deprecated, 1)
	msg := g.Deprecated[0].Message()
	require.Contains(t, msg, "SLUICE_RETRY_INTERVAL now sets only the scheduler's re-offer period")
	require.Contains(t, msg, "SLUICE_GATEWAY_RETRY_AFTER")

	g, err = gateway.LoadConfig(map[string]string{"SLUICE_RETRY_INTERVAL": "7s", "SLUICE_GATEWAY_RETRY_AFTER": "3s"})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, g.RetryAfter)
	require.Empty(t, g.Deprecated, "set for the scheduler: no warning")
}
