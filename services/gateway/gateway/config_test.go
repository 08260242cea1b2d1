package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/gateway/gateway"
)

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.LoadConfig(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.HTTPAddr)
	require.Equal(t, 1000, cfg.MaxActive)
	require.Zero(t, cfg.TenantMaxActive)
	require.Empty(t, cfg.APITokens)
	require.Equal(t, 10*time.Minute, cfg.DispatchDeadline)
	require.Equal(t, 3, cfg.DefaultMaxAttempts)
	require.Equal(t, 2*time.Second, cfg.RetryAfter)
	require.Equal(t, int64(1<<20), cfg.MaxBodyBytes)
	require.Equal(t, int64(1<<20), cfg.MaxBatchBytes)
	require.Equal(t, 10000, cfg.MaxItemsPerRequest)
	require.Equal(t, 100000, cfg.TenantMaxItems)
	require.Equal(t, int32(1<<20+64<<10), cfg.NATSMaxPayload(), "the largest batch and its headers")
	require.Equal(t, 30*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, "./.sluice", cfg.Store.DataDir)
	require.Empty(t, cfg.Bus.URL)
	require.Equal(t, "info", cfg.Log.LogLevel)
	require.Equal(t, 1000, cfg.MaxStreams)
	require.Equal(t, 100, cfg.TenantMaxStreams)
	require.Equal(t, 200.0, cfg.RateLimitTenantRead)
	require.Equal(t, 400, cfg.RateLimitTenantReadBurst)
	require.Empty(t, cfg.OperatorTenants)
	require.Empty(t, cfg.PinRoots, "pinning is off unless the operator names its roots")
	require.Equal(t, int64(1<<30), cfg.MaxPinBytes)
	require.Equal(t, 4, cfg.MaxPins)
	require.Equal(t, 1, cfg.TenantMaxPins)
	require.Equal(t, float64(64<<20), cfg.RateLimitTenantPin)
	require.Equal(t, 16<<20, cfg.RateLimitTenantPinBurst)
	require.Equal(t, 10000, cfg.PinCacheEntries)
	require.Equal(t, cfg, gateway.DefaultConfig())
}

func TestLoadConfigOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.LoadConfig(map[string]string{
		"SLUICE_HTTP_ADDR":                            ":9090",
		"SLUICE_MAX_ACTIVE":                           "0",
		"SLUICE_TENANT_MAX_ACTIVE":                    "25",
		"SLUICE_API_TOKENS":                           " acme:t1 , acme:t2,globex.eu:t3 ",
		"SLUICE_DISPATCH_DEADLINE":                    "1h30m",
		"SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS":         "7",
		"SLUICE_GATEWAY_RETRY_AFTER":                  "250ms",
		"SLUICE_GATEWAY_MAX_BODY_BYTES":               "4096",
		"SLUICE_SHUTDOWN_TIMEOUT":                     "5s",
		"SLUICE_NATS_URL":                             "nats://127.0.0.1:4222",
		"SLUICE_DATA_DIR":                             "/var/lib/sluice",
		"SLUICE_LOG_LEVEL":                            "debug",
		"SLUICE_GATEWAY_OPERATOR_TENANTS":             "globex.eu",
		"SLUICE_GATEWAY_MAX_STREAMS":                  "50",
		"SLUICE_GATEWAY_TENANT_MAX_STREAMS":           "50",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ":       "5",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST": "10",
		"SLUICE_GATEWAY_MAX_PINS":                     "8",
		"SLUICE_GATEWAY_TENANT_MAX_PINS":              "2",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN":        "0",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN_BURST":  "0",
		"SLUICE_GATEWAY_PIN_CACHE_ENTRIES":            "0",
	})
	require.NoError(t, err)
	require.Equal(t, ":9090", cfg.HTTPAddr)
	require.Zero(t, cfg.MaxActive)
	require.Equal(t, 25, cfg.TenantMaxActive)
	require.Equal(t, 90*time.Minute, cfg.DispatchDeadline)
	require.Equal(t, 7, cfg.DefaultMaxAttempts)
	require.Equal(t, 250*time.Millisecond, cfg.RetryAfter)
	require.Equal(t, int64(4096), cfg.MaxBodyBytes)
	require.Equal(t, 5*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, "nats://127.0.0.1:4222", cfg.Bus.URL)
	require.Equal(t, "/var/lib/sluice", cfg.Store.DataDir)
	require.Equal(t, "debug", cfg.Log.LogLevel)
	require.Equal(t, []string{"globex.eu"}, cfg.OperatorTenants)
	require.Equal(t, 50, cfg.MaxStreams)
	require.Equal(t, 50, cfg.TenantMaxStreams)
	require.Equal(t, 5.0, cfg.RateLimitTenantRead)
	require.Equal(t, 10, cfg.RateLimitTenantReadBurst)
	require.Equal(t, 8, cfg.MaxPins)
	require.Equal(t, 2, cfg.TenantMaxPins)
	require.Zero(t, cfg.RateLimitTenantPin, "pins not paced")
	require.Zero(t, cfg.PinCacheEntries, "no digest kept")
}

func TestLoadConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token-value"
	cases := []struct {
		name, variable, value string
	}{
		{"max active not a number", "SLUICE_MAX_ACTIVE", "lots"},
		{"max active negative", "SLUICE_MAX_ACTIVE", "-1"},
		{"tenant max negative", "SLUICE_TENANT_MAX_ACTIVE", "-2"},
		{"tokens without colon", "SLUICE_API_TOKENS", secret},
		{"tokens empty entry", "SLUICE_API_TOKENS", "a:" + secret + ",,b:x"},
		{"tokens bad tenant", "SLUICE_API_TOKENS", "bad tenant!:" + secret},
		{"tokens long tenant", "SLUICE_API_TOKENS", strings.Repeat("t", 65) + ":" + secret},
		{"tokens empty token", "SLUICE_API_TOKENS", "acme:"},
		{"tokens token with space", "SLUICE_API_TOKENS", "acme:" + secret + " x"},
		{"tokens shared by two tenants", "SLUICE_API_TOKENS", "a:" + secret + ",b:" + secret},
		{"deadline zero", "SLUICE_DISPATCH_DEADLINE", "0s"},
		{"deadline words", "SLUICE_DISPATCH_DEADLINE", "soon"},
		{"attempts zero", "SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS", "0"},
		{"attempts too many", "SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS", "101"},
		{"retry negative", "SLUICE_GATEWAY_RETRY_AFTER", "-1s"},
		{"body zero", "SLUICE_GATEWAY_MAX_BODY_BYTES", "0"},
		{"body huge", "SLUICE_GATEWAY_MAX_BODY_BYTES", "1099511627776"},
		{"batch over what NATS carries", "SLUICE_GATEWAY_MAX_BATCH_BYTES", "67108864"},
		{"items per request zero", "SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST", "0"},
		{"items per request huge", "SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST", "1000000000"},
		{"tenant items negative", "SLUICE_GATEWAY_TENANT_MAX_ITEMS", "-1"},
		{"shutdown zero", "SLUICE_SHUTDOWN_TIMEOUT", "0s"},
		{"addr without port", "SLUICE_HTTP_ADDR", "localhost"},
		{"store scheme", "SLUICE_STORE", "postgres://db"},
		{"streams zero", "SLUICE_GATEWAY_MAX_STREAMS", "0"},
		{"tenant share zero", "SLUICE_GATEWAY_TENANT_MAX_STREAMS", "0"},
		{"tenant share over the pool", "SLUICE_GATEWAY_TENANT_MAX_STREAMS", "1001"},
		{"read rate negative", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ", "-1"},
		{"read rate NaN", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ", "NaN"},
		{"read burst zero", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST", "0"},
		{"operators in open mode", "SLUICE_GATEWAY_OPERATOR_TENANTS", "acme"},
		{"pin root relative", "SLUICE_PIN_ROOTS", "data/pins"},
		{"pin root missing", "SLUICE_PIN_ROOTS", "/no/such/dir"},
		{"pin root a file", "SLUICE_PIN_ROOTS", "/etc/passwd"},
		{"pin bound zero", "SLUICE_GATEWAY_MAX_PIN_BYTES", "0"},
		{"pin bound huge", "SLUICE_GATEWAY_MAX_PIN_BYTES", "1099511627777"},
		{"pins zero", "SLUICE_GATEWAY_MAX_PINS", "0"},
		{"tenant pins zero", "SLUICE_GATEWAY_TENANT_MAX_PINS", "0"},
		{"tenant pins over the gateway's", "SLUICE_GATEWAY_TENANT_MAX_PINS", "5"},
		{"pin rate negative", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN", "-1"},
		{"pin burst zero", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN_BURST", "0"},
		{"pin cache negative", "SLUICE_GATEWAY_PIN_CACHE_ENTRIES", "-1"},
	}
	// An operator must be a tenant of SLUICE_API_TOKENS.
	for name, env := range map[string]map[string]string{
		"unknown operator": {"SLUICE_API_TOKENS": "acme:" + secret, "SLUICE_GATEWAY_OPERATOR_TENANTS": "acme,globex"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := gateway.LoadConfig(env)
			require.ErrorContains(t, err, "SLUICE_GATEWAY_OPERATOR_TENANTS")
			require.ErrorContains(t, err, "globex")
			require.NotContains(t, err.Error(), secret, "errors never show a token")
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := gateway.LoadConfig(map[string]string{tc.variable: tc.value})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.variable)
			require.NotContains(t, err.Error(), secret, "errors never show a token")
		})
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	_, err := gateway.New(cfg, gateway.Deps{NC: b.nc})
	require.ErrorContains(t, err, "Store")
	_, err = gateway.New(cfg, gateway.Deps{Store: b.st})
	require.ErrorContains(t, err, "NC")
	cfg.DefaultMaxAttempts = 0
	_, err = gateway.New(cfg, gateway.Deps{Store: b.st, NC: b.nc})
	require.ErrorContains(t, err, "SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS")
}
