package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// gateway, NATS server, connection and store a test starts must be stopped
// by its cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Tenants and tokens of the token-mode bundles.
const (
	tenantA = "acme"
	tenantB = "globex"
	tokenA  = "tok-acme-0123456789"
	tokenB  = "tok-globex-9876543210"
	// opsTenant is the bundles' operator (SLUICE_GATEWAY_OPERATOR_TENANTS),
	// whose token reads /metrics.
	opsTenant = "ops"
	opsToken  = "tok-ops-5555555555"
)

// option changes a bundle's configuration before its gateways are built.
type option func(*gateway.Config)

// openMode runs the API without tokens.
func openMode() option {
	return func(c *gateway.Config) { c.APITokens, c.OperatorTenants = "", nil }
}

// caps sets the global and per-tenant caps.
func caps(global, tenant int) option {
	return func(c *gateway.Config) { c.MaxActive, c.TenantMaxActive = global, tenant }
}

// itemLimits sets SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST and SLUICE_GATEWAY_TENANT_MAX_ITEMS.
func itemLimits(perRequest, tenant int) option {
	return func(c *gateway.Config) { c.MaxItemsPerRequest, c.TenantMaxItems = perRequest, tenant }
}

// maxBody sets SLUICE_GATEWAY_MAX_BODY_BYTES.
func maxBody(n int64) option { return func(c *gateway.Config) { c.MaxBodyBytes = n } }

// rateLimits sets the per-tenant and per-IP rate limits (0 = off).
func rateLimits(tenant float64, tenantBurst int, ip float64, ipBurst int) option {
	return func(c *gateway.Config) {
		c.RateLimitTenant, c.RateLimitTenantBurst = tenant, tenantBurst
		c.RateLimitIP, c.RateLimitIPBurst = ip, ipBurst
	}
}

// streams sets SLUICE_GATEWAY_MAX_STREAMS and SLUICE_GATEWAY_TENANT_MAX_STREAMS.
func streams(pool, tenant int) option {
	return func(c *gateway.Config) { c.MaxStreams, c.TenantMaxStreams = pool, tenant }
}

// readRateLimit sets the per-tenant read rate limit (0 = off).
func readRateLimit(perSecond float64, burst int) option {
	return func(c *gateway.Config) { c.RateLimitTenantRead, c.RateLimitTenantReadBurst = perSecond, burst }
}

// operatorTenants adds tenants to SLUICE_GATEWAY_OPERATOR_TENANTS.
func operatorTenants(tenants ...string) option {
	return func(c *gateway.Config) { c.OperatorTenants = append(c.OperatorTenants, tenants...) }
}

// hooks adjust how a bundle's gateways are built.
type hooks struct {
	// deps changes each gateway's Deps before New.
	deps func(*gateway.Deps)
	// gw changes each gateway after New, before Serve.
	gw func(*gateway.Gateway)
}

// bundle is one test's private world: an embedded NATS server with the job
// stream, a SQLite store in a temp dir and one or more gateways on them.
type bundle struct {
	tb     testing.TB
	cfg    gateway.Config
	path   string
	ns     *server.Server
	nc     *nats.Conn // the test's own connection
	js     jetstream.JetStream
	stream jetstream.Stream
	st     *sqlite.Store // the test's own handle on the store
	gws    []*instance
	hooks  hooks
}

// instance is one gateway process: its own store handle, NATS connection,
// metrics registry, httptest server and Serve loop.
type instance struct {
	gw  *gateway.Gateway
	srv *httptest.Server
	st  *sqlite.Store
	nc  *nats.Conn
	reg *prometheus.Registry
	// serveURL is the listener Serve runs the HTTP API on.
	serveURL string
}

// setup builds a fresh bundle with one gateway, in token mode (tenants
// acme and globex) unless openMode is given.
func setup(tb testing.TB, opts ...option) *bundle {
	tb.Helper()
	return setupWith(tb, hooks{}, opts...)
}

// setupWith is setup with hooks applied to every gateway of the bundle.
func setupWith(tb testing.TB, h hooks, opts ...option) *bundle {
	tb.Helper()
	dir := tb.TempDir()
	cfg := gateway.DefaultConfig()
	cfg.Store.DataDir = dir
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.APITokens = tenantA + ":" + tokenA + "," + tenantB + ":" + tokenB + "," + opsTenant + ":" + opsToken
	cfg.OperatorTenants = []string{opsTenant}
	cfg.RetryAfter = 1500 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	for _, o := range opts {
		o(&cfg)
	}
	b := &bundle{tb: tb, cfg: cfg, path: filepath.Join(dir, "sluice.db"), hooks: h}

	b.ns = bustest.StartWith(tb, bus.EmbeddedOptions{Dir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0"}).NS
	b.nc = b.connect()
	var err error
	b.js, err = jetstream.New(b.nc)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.stream, err = bus.EnsureStream(ctx, b.js)
	require.NoError(tb, err)

	b.st = b.openStore()
	b.addGateway()
	return b
}

// connect opens a NATS connection closed at cleanup.
func (b *bundle) connect() *nats.Conn {
	b.tb.Helper()
	nc, err := nats.Connect(b.ns.ClientURL(), nats.MaxReconnects(0))
	require.NoError(b.tb, err)
	b.tb.Cleanup(nc.Close)
	return nc
}

// openStore opens the bundle's database file, as another process would.
func (b *bundle) openStore() *sqlite.Store {
	b.tb.Helper()
	st, err := sqlite.Open(context.Background(), b.path)
	require.NoError(b.tb, err)
	var once sync.Once
	b.tb.Cleanup(func() { once.Do(func() { _ = st.Close() }) })
	return st
}

// addGateway starts one more gateway on the same store file and NATS
// server, as a second process would.
func (b *bundle) addGateway() *instance {
	tb := b.tb
	tb.Helper()
	in := &instance{st: b.openStore(), nc: b.connect(), reg: prometheus.NewRegistry()}
	deps := gateway.Deps{Store: in.st, NC: in.nc, Registry: in.reg}
	if b.hooks.deps != nil {
		b.hooks.deps(&deps)
	}
	gw, err := gateway.New(b.cfg, deps)
	require.NoError(tb, err)
	if b.hooks.gw != nil {
		b.hooks.gw(gw)
	}
	in.gw = gw
	in.srv = httptest.NewServer(gw.Handler())
	tb.Cleanup(in.srv.Close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	in.serveURL = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(tb, err)
		case <-time.After(10 * time.Second):
			tb.Error("gateway did not stop within 10s")
		}
	})
	b.waitForService()
	b.gws = append(b.gws, in)
	return in
}

// waitForService waits until the NATS submit service lists its submit
// endpoints. A ping alone is not enough: the service answers pings as
// soon as it exists, before its endpoints subscribe. The service's
// connection sends an endpoint's subscription before any answer that
// lists it, so once listed, the endpoint takes requests.
func (b *bundle) waitForService() {
	b.tb.Helper()
	subj, err := micro.ControlSubject(micro.InfoVerb, contracts.SubmitServiceName, "")
	require.NoError(b.tb, err)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		msg, err := b.nc.Request(subj, nil, 200*time.Millisecond)
		if err != nil {
			continue
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil {
			continue
		}
		listed := map[string]bool{}
		for _, e := range info.Endpoints {
			listed[e.Subject] = true
		}
		if listed[contracts.SubjectSubmit] && listed[contracts.SubjectSubmitBatch] {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.tb.Fatal("nats submit service never listed its endpoints")
}

// response is one HTTP answer, body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// req describes one HTTP request of a test.
type req struct {
	method, path string
	token        string // "" = no Authorization header
	body         string
	contentType  string // "" = application/json when there is a body
	header       map[string]string
}

// do sends r to the first gateway's httptest server.
func (b *bundle) do(r req) response { return b.doOn(b.gws[0].srv.URL, r) }

// doOn sends r to the gateway at base.
func (b *bundle) doOn(base string, r req) response {
	b.tb.Helper()
	var body io.Reader
	if r.body != "" {
		body = bytes.NewBufferString(r.body)
	}
	hr, err := http.NewRequest(r.method, base+r.path, body)
	require.NoError(b.tb, err)
	switch {
	case r.contentType != "":
		hr.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(hr)
	require.NoError(b.tb, err)
	defer func() { _ = res.Body.Close() }()
	data, err := io.ReadAll(res.Body)
	require.NoError(b.tb, err)
	return response{status: res.StatusCode, header: res.Header, body: data}
}

// submit posts body to /v1/jobs with token.
func (b *bundle) submit(token, body string) response {
	b.tb.Helper()
	return b.do(req{method: http.MethodPost, path: "/v1/jobs", token: token, body: body})
}

// metricsText scrapes the first gateway's /metrics, with the operator's
// token in token mode, and wants 200.
func (b *bundle) metricsText() string {
	b.tb.Helper()
	r := b.do(req{method: http.MethodGet, path: "/metrics", token: b.metricsToken()})
	require.Equal(b.tb, http.StatusOK, r.status, string(r.body))
	return string(r.body)
}

// metricsToken is the token that reads /metrics: the operator's in token
// mode, none in open mode.
func (b *bundle) metricsToken() string {
	if b.cfg.APITokens == "" {
		return ""
	}
	return opsToken
}

// job decodes a job answer.
func (r response) job(tb testing.TB) contracts.Job {
	tb.Helper()
	var j contracts.Job
	require.NoError(tb, json.Unmarshal(r.body, &j), string(r.body))
	require.NotEmpty(tb, j.ID, string(r.body))
	return j
}

// errBody decodes an error answer and checks its shape.
func (r response) errBody(tb testing.TB) contracts.ErrorDetail {
	tb.Helper()
	var e contracts.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	require.NoError(tb, dec.Decode(&e), string(r.body))
	require.NotEmpty(tb, e.Error.Code, string(r.body))
	require.NotEmpty(tb, e.Error.Message, string(r.body))
	return e.Error
}

// requireError checks an error answer's status, code and JSON headers.
func (r response) requireError(tb testing.TB, status int, code string) contracts.ErrorDetail {
	tb.Helper()
	require.Equal(tb, status, r.status, string(r.body))
	require.Equal(tb, "application/json", r.header.Get("Content-Type"))
	require.Equal(tb, "nosniff", r.header.Get("X-Content-Type-Options"))
	e := r.errBody(tb)
	require.Equal(tb, code, e.Code, string(r.body))
	return e
}

// snapshot is everything the store holds, to compare before and after a
// request that must write nothing.
type snapshot struct {
	counts store.Counts
	jobs   []contracts.Job
}

// snap reads the whole store.
func (b *bundle) snap() snapshot {
	b.tb.Helper()
	ctx := context.Background()
	c, err := b.st.Stats(ctx)
	require.NoError(b.tb, err)
	var all []contracts.Job
	cursor := ""
	for {
		jobs, next, err := b.st.List(ctx, store.Query{Limit: 1000, Cursor: cursor})
		require.NoError(b.tb, err)
		all = append(all, jobs...)
		if next == "" {
			break
		}
		cursor = next
	}
	return snapshot{counts: c, jobs: all}
}

// finish moves a job straight to succeeded in the store, as a worker's
// result would.
func (b *bundle) finish(id string) contracts.Job {
	b.tb.Helper()
	ctx := context.Background()
	j, err := b.st.Get(ctx, id)
	require.NoError(b.tb, err)
	out, err := b.st.Transition(ctx, store.Expect{ID: id, State: j.State, Claim: j.Claim},
		store.Change{Now: time.Now(), State: contracts.StateSucceeded})
	require.NoError(b.tb, err)
	return out
}

// start moves a pending job to running on worker, as the scheduler would.
func (b *bundle) start(id, worker string) contracts.Job {
	b.tb.Helper()
	now := time.Now()
	out, err := b.st.Transition(context.Background(),
		store.Expect{ID: id, State: contracts.StatePending, Claim: 0},
		store.Change{Now: now, State: contracts.StateRunning, Claim: 1, IncAttempt: true,
			Worker: &worker, StartedAt: &now, HeartbeatAt: &now})
	require.NoError(b.tb, err)
	return out
}

// waitUntil polls cond in the test's goroutine (so cond may use require)
// until it holds, failing the test after 10 seconds.
func waitUntil(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
