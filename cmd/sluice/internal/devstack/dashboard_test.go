package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The dashboard test's tenant and token: the stack runs in token mode, so
// the page has to send the token the user typed.
const (
	dashTenant = "acme"
	dashToken  = "tok-acme-dashboard-0123"
)

// uiWait bounds each wait for the page to show something. It is generous:
// the page updates within a second or two, but a loaded CI machine may be
// slow to start the browser.
const uiWait = 90 * time.Second

// chromiumPath finds a Chromium or Chrome binary.
func chromiumPath() (string, bool) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// a whole stack in token mode: the page asks for the token, then shows the
// workers in offer order with their slots, the admission gauge, a job
// submitted through the API running to succeeded, the event stream resumed
// with Last-Event-ID after a drop, a 429 in the recent rejections, progress
// bars, and a long job cancelled with its row's cancel button; the page
// reports no exception and no policy violation. It saves a screenshot
// (dashboard.png) into SLUICE_ARTIFACTS_DIR, or into a temporary directory.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	b := startTokenStack(t, Options{Workers: 3}, map[string]string{
		"SLUICE_API_TOKENS":                  dashTenant + ":" + dashToken,
		"SLUICE_MAX_ACTIVE":                  "4",
		"SLUICE_TENANT_MAX_ACTIVE":           "4",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "2",
	})
	proxy := newStreamProxy(t, b.base)
	ctx := newBrowser(t, chromium)
	problems := watchPage(t, ctx)

	// Without a token the page says it needs one.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(proxy.url+"/")))
	waitFor(t, ctx, `#conn[data-conn="unauthorized"]`, "the page never asked for a token")

	// With it, the event stream goes live and the workers show in offer order.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), dashToken),
		chromedp.Click(chromedp.CSS(`#token-form button`)),
	))
	waitFor(t, ctx, `#conn[data-conn="live"]`, "the event stream never went live")
	waitFor(t, ctx, `#worker-rows .worker:nth-child(3)`, "the workers never showed")
	ids := evalJS[[]string](t, ctx, `[...document.querySelectorAll('#worker-rows .worker')].map(w => w.dataset.workerId)`)
	require.Equal(t, []string{"worker-01", "worker-02", "worker-03"}, ids)
	require.Equal(t, 6, evalJS[int](t, ctx, `document.querySelectorAll('#worker-rows .slot').length`), "2 slots per worker")
	// Each worker says what walls its exec runs get (a tag; "exec
	// unwalled" when they keep its uid).
	for _, iso := range evalJS[[]string](t, ctx, `[...document.querySelectorAll('#worker-rows .worker')].map(w => w.dataset.isolation)`) {
		require.True(t, contracts.Isolation(iso).Valid(), "isolation %q", iso)
	}
	require.Equal(t, 3, evalJS[int](t, ctx, `document.querySelectorAll('#worker-rows .worker .tag.iso, #worker-rows .worker .tag.warn').length`))

	// A short job submitted through the API runs to succeeded in the table.
	short := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":300}}`)
	waitFor(t, ctx, jobRow(short, "succeeded"), "the short job never showed succeeded")
	require.Equal(t, "1 / 3", evalJS[string](t, ctx, `document.querySelector('[data-job-id="`+short+`"] .attempt').textContent`), "attempt of max attempts, not the claim counter")
	require.Equal(t, "1", evalJS[string](t, ctx, `document.querySelector('[data-job-id="`+short+`"] .claim').textContent`), "the claim counter, in a column of its own")

	// The stream drops: the page reconnects, resuming after the last event
	// it read.
	seen := proxy.lastEventID()
	require.NotEmpty(t, seen, "no event went through the stream")
	streams := len(proxy.resumes())
	proxy.drop()
	require.Eventually(t, func() bool { return len(proxy.resumes()) > streams }, uiWait, 20*time.Millisecond, "the page never reconnected")
	require.Equal(t, seen, proxy.resumes()[streams], "Last-Event-ID of the reconnection")
	waitFor(t, ctx, `#conn[data-conn="live"]`, "the event stream never came back")

	// Fill the cap with long jobs: four run, the fifth is turned away.
	var long []string
	for range 4 {
		long = append(long, b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":30000}}`))
	}
	t.Cleanup(func() { // let the stack stop without waiting for them
		for _, id := range long {
			b.tokenDo(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", "")
		}
	})
	for _, id := range long {
		waitFor(t, ctx, jobRow(id, "running"), "a long job never showed running")
	}
	status, body := b.tokenDo(t, http.MethodPost, "/v1/jobs", `{"kind":"sleep","payload":{"ms":1}}`)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	waitFor(t, ctx, `#rejection-rows tr.rejection [data-limit="global"]`, "the 429 never showed")
	// A flood of 429s folds into one row with a count, and the jobs table
	// stays on the first screen.
	for range 30 {
		status, _ := b.tokenDo(t, http.MethodPost, "/v1/jobs", `{"kind":"sleep","payload":{"ms":1}}`)
		require.Equal(t, http.StatusTooManyRequests, status)
	}
	waitTrue(t, ctx, `document.querySelector('#rejection-rows tr.rejection .count').textContent === '×31'`, "the 429s were not folded into one row with a count")
	require.Equal(t, 1, evalJS[int](t, ctx, `document.querySelectorAll('#rejection-rows tr.rejection').length`))
	require.True(t, evalJS[bool](t, ctx, `[...document.querySelectorAll('main > section')].every(s => s.getBoundingClientRect().top < window.innerHeight - 100)`),
		"a panel is below the first screen")
	require.True(t, evalJS[bool](t, ctx, `document.getElementById('job-table').getBoundingClientRect().top < window.innerHeight - 100`),
		"the jobs table is below the first screen (top at %v of %v)",
		evalJS[float64](t, ctx, `document.getElementById('job-table').getBoundingClientRect().top`), evalJS[float64](t, ctx, `window.innerHeight`))
	waitTrue(t, ctx, `document.getElementById('gauge-global-value').textContent === '4 / 4'`, "the gauge never showed 4 of 4")
	waitFor(t, ctx, `#gauge-global[data-level="full"]`, "the gauge never showed the cap reached")
	waitFor(t, ctx, `#gauge-tenants .gauge[data-tenant="`+dashTenant+`"][data-level="full"]`, "the tenant gauge never showed")
	waitTrue(t, ctx, `document.querySelectorAll('#worker-rows .slot.filled').length === 4`, "the workers' slots never filled")
	waitFor(t, ctx, `tr[data-job-id="`+long[0]+`"] .progress`, "no progress bar on a running job")

	// Cancel the last long job with its button.
	victim := long[len(long)-1]
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-job-id="`+victim+`"] button.cancel`))))
	waitFor(t, ctx, jobRow(victim, "cancelled"), "the cancelled job never showed cancelled")
	var j contracts.Job
	_, body = b.tokenDo(t, http.MethodGet, "/v1/jobs/"+victim, "")
	require.NoError(t, json.Unmarshal([]byte(body), &j))
	require.Equal(t, contracts.StateCancelled, j.State)
	waitTrue(t, ctx, `document.getElementById('gauge-global-value').textContent === '3 / 4'`, "the gauge never went down")
	waitTrue(t, ctx, `document.querySelector('#count-tiles .tile[data-state="cancelled"] .n').textContent === '1'`, "the counts never showed the cancel")
	require.Equal(t, "1", evalJS[string](t, ctx, `document.querySelector('#count-tiles .tile[data-state="succeeded"] .n').textContent`))
	require.Equal(t, "3", evalJS[string](t, ctx, `document.querySelector('#count-tiles .tile[data-state="running"] .n').textContent`))
	// The finished rows lost their cancel buttons; the running ones kept them.
	require.True(t, evalJS[bool](t, ctx, `document.querySelector('[data-job-id="`+short+`"] button.cancel').hidden`))
	require.False(t, evalJS[bool](t, ctx, `document.querySelector('[data-job-id="`+long[0]+`"] button.cancel').hidden`))

	saveScreenshot(t, ctx)
	require.Empty(t, problems(), "the page reported errors")
}

// TestDashboardOpenModeAndTenantView: in open mode the page needs no
// token and shows the workers; with the token of a tenant that is not an
// operator it shows that tenant's jobs and counts, no worker, and reports
// no error either way.
func TestDashboardOpenModeAndTenantView(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	t.Run("open mode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ": "200"})
		ctx := newBrowser(t, chromium)
		problems := watchPage(t, ctx)
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/")))
		waitFor(t, ctx, `#conn[data-conn="live"]`, "the event stream never went live")
		waitFor(t, ctx, `#worker-rows .worker`, "the workers never showed")
		j := b.mustSubmit("sleep", map[string]int{"ms": 100})
		waitFor(t, ctx, jobRow(j.ID, "succeeded"), "the job never showed succeeded")
		require.Empty(t, problems(), "the page reported errors")
	})
	t.Run("tenant", func(t *testing.T) {
		t.Parallel()
		b := startTokenStack(t, Options{Workers: 1}, map[string]string{
			"SLUICE_API_TOKENS":               dashTenant + ":" + dashToken + ",ops:ops-token-0123",
			"SLUICE_GATEWAY_OPERATOR_TENANTS": "ops",
		})
		ctx, problems := openDashboard(t, chromium, b)
		id := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":100}}`)
		waitFor(t, ctx, jobRow(id, "succeeded"), "the job never showed succeeded")
		waitTrue(t, ctx, `document.querySelector('#count-tiles .tile[data-state="succeeded"] .n').textContent === '1'`, "the counts never showed the job")
		require.Zero(t, evalJS[int](t, ctx, `document.querySelectorAll('#worker-rows .worker').length`), "a tenant sees no worker")
		require.Empty(t, problems(), "the page reported errors")
	})
}

// TestDashboardNoCap: without caps the admission gauges say "no cap" and
// stay empty, never a full bar that reads as 100 %.
func TestDashboardNoCap(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS":        dashTenant + ":" + dashToken,
		"SLUICE_MAX_ACTIVE":        "0",
		"SLUICE_TENANT_MAX_ACTIVE": "0",
	})
	ctx, problems := openDashboard(t, chromium, b)

	id := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":30000}}`)
	t.Cleanup(func() { b.tokenDo(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", "") })
	waitTrue(t, ctx, `document.getElementById('gauge-global-value').textContent === '1 active · no cap'`, "the gauge never said no cap")
	waitFor(t, ctx, `#gauge-tenants .gauge[data-tenant="`+dashTenant+`"][data-level="uncapped"]`, "the tenant gauge never showed")
	require.Equal(t, "uncapped", evalJS[string](t, ctx, `document.getElementById('gauge-global').dataset.level`))
	require.Zero(t, evalJS[float64](t, ctx, `document.getElementById('gauge-global-fill').getBoundingClientRect().width`), "the global bar is not empty")
	require.Zero(t, evalJS[float64](t, ctx, `document.querySelector('#gauge-tenants .gauge .fill').getBoundingClientRect().width`), "the tenant bar is not empty")
	require.Empty(t, problems(), "the page reported errors")
}

// TestDashboardFoldsAFanout: a fan-out is one row whose attempt column counts
// its children and whose bar is their progress; its children have no rows
// of their own and unfold under it with its button.
func TestDashboardFoldsAFanout(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS":                  dashTenant + ":" + dashToken,
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
	})
	ctx, problems := openDashboard(t, chromium, b)

	id := b.tokenSubmit(t, `{"kind":"sleep","items":[{"ms":400},{"ms":400},{"ms":400},{"ms":400},{"ms":400},{"ms":400}],"concurrency":2}`)
	waitFor(t, ctx, jobRow(id, "running"), "the parent never showed running")
	// The button is clicked again while nothing is unfolded: on a loaded
	// machine a click can land while the table redraws its row.
	waitTrue(t, ctx, `(() => {
		if (!document.querySelector('tr.kids-row')) document.querySelector('tr[data-job-id="`+id+`"] button.fold')?.click();
		return document.querySelectorAll('tr.kids-row li.kid').length === 6;
	})()`, "the children never unfolded")
	waitFor(t, ctx, jobRow(id, "succeeded"), "the parent never showed succeeded")
	waitTrue(t, ctx, `document.querySelector('tr[data-job-id="`+id+`"] .attempt').textContent === '6 / 6'`, "the attempt column never counted the children")
	waitTrue(t, ctx, `document.querySelectorAll('tr.kids-row li.kid[data-state="succeeded"]').length === 6`, "the unfolded children never all succeeded")
	require.Zero(t, evalJS[int](t, ctx, `document.querySelectorAll('tr[data-job-id^="`+id+`-"]').length`), "a child got a row of its own")
	require.Equal(t, "100%", evalJS[string](t, ctx, `document.querySelector('tr[data-job-id="`+id+`"] .progress .pct').textContent`))
	require.Empty(t, problems(), "the page reported errors")
}

// TestDashboardWithoutSpawner: with no spawner configured (SLUICE_SCHEDULER_SPAWN
// empty) the schedulers' scale requests are only published; the page
// lists none of them as if a worker had been asked for, and says instead
// that no spawner is configured, naming the kind short of workers.
func TestDashboardWithoutSpawner(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	b := startTokenStack(t, Options{Workers: -1}, map[string]string{
		"SLUICE_API_TOKENS":                dashTenant + ":" + dashToken,
		"SLUICE_SCHEDULER_SPAWN_COOLDOWN":  "100ms",
		"SLUICE_SCHEDULER_NO_WORKER_GRACE": "10m",
	})
	id := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":10}}`)
	t.Cleanup(func() { b.tokenDo(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", "") })
	require.Eventually(t, func() bool {
		_, body := b.tokenDo(t, http.MethodGet, "/v1/stats", "")
		var st contracts.Stats
		return json.Unmarshal([]byte(body), &st) == nil && len(st.RecentScaleRequests) > 0
	}, uiWait, 50*time.Millisecond, "the gateway never heard a scale request")
	_, body := b.tokenDo(t, http.MethodGet, "/v1/stats", "")
	var st contracts.Stats
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Empty(t, st.RecentScaleRequests[0].Spawner, "no spawner acts on it")

	ctx, problems := openDashboard(t, chromium, b)
	waitFor(t, ctx, `#worker-rows .no-spawner[data-kinds="sleep"]`, "the page never said no spawner is configured")
	require.Zero(t, evalJS[int](t, ctx, `document.querySelectorAll('#worker-rows .scale-request').length`),
		"the page lists scale requests nothing acts on")
	require.Contains(t, evalJS[string](t, ctx, `document.querySelector('#worker-rows .no-spawner').textContent`), "no spawner configured")
	require.Empty(t, problems(), "the page reported errors")
}

// needChromium skips the test in -short mode or without Chromium, and
// returns Chromium's path.
func needChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("headless Chromium: not run with -short (make test runs it)")
	}
	chromium, ok := chromiumPath()
	if !ok {
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run installs it): skipping the dashboard browser test")
	}
	return chromium
}

// openDashboard opens b's dashboard in a fresh browser, signs in with the
// tenant's token and waits for its event stream; problems reports what the
// page logged as errors.
func openDashboard(t *testing.T, chromium string, b *bundle) (context.Context, func() []string) {
	t.Helper()
	ctx := newBrowser(t, chromium)
	problems := watchPage(t, ctx)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/")))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), dashToken),
		chromedp.Click(chromedp.CSS(`#token-form button`)),
	))
	waitFor(t, ctx, `#conn[data-conn="live"]`, "the event stream never went live")
	return ctx, problems
}

// streamProxy stands between the page and the gateway like a flaky
// network: it forwards everything, can drop the open event streams, and
// records the Last-Event-ID of every GET /v1/events and the last event id
// it passed on.
type streamProxy struct {
	url string

	mu      sync.Mutex
	cancels []context.CancelFunc
	resumed []string
	lastID  string
}

// newStreamProxy serves a proxy to the gateway at target until the test ends.
func newStreamProxy(t *testing.T, target string) *streamProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &streamProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		FlushInterval: -1, // pass each event on at once
		ModifyResponse: func(res *http.Response) error {
			if res.Request.URL.Path == "/v1/events" {
				res.Body = &idScanner{ReadCloser: res.Body, p: p}
			}
			return nil
		},
		ErrorLog: stdlog.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			p.mu.Lock()
			p.cancels = append(p.cancels, cancel)
			p.resumed = append(p.resumed, r.Header.Get("Last-Event-ID"))
			p.mu.Unlock()
			r = r.WithContext(ctx)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// drop cuts every open event stream.
func (p *streamProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cancels {
		c()
	}
	p.cancels = nil
}

// resumes lists the Last-Event-ID header of each stream request, in order.
func (p *streamProxy) resumes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.resumed...)
}

// lastEventID is the id of the last event passed on to the page.
func (p *streamProxy) lastEventID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastID
}

// idScanner notes the "id:" lines of an event stream as they pass.
type idScanner struct {
	io.ReadCloser
	p       *streamProxy
	partial []byte
}

// Read implements io.Reader.
func (s *idScanner) Read(b []byte) (int, error) {
	n, err := s.ReadCloser.Read(b)
	s.partial = append(s.partial, b[:n]...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(s.partial[:i]), "\r")
		s.partial = s.partial[i+1:]
		if id, ok := strings.CutPrefix(line, "id:"); ok {
			s.p.mu.Lock()
			s.p.lastID = strings.TrimPrefix(id, " ")
			s.p.mu.Unlock()
		}
	}
	return n, err
}

// jobRow selects a job's table row in a state.
func jobRow(id string, state contracts.JobState) string {
	return fmt.Sprintf(`tr[data-job-id=%q][data-state=%q]`, id, state)
}

// newBrowser starts headless Chromium with the flags that work without a
// network, in a fresh profile, closed when the test ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "sluice-chromium-")
	require.NoError(t, err)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// The browser's helpers may still write briefly after it exits.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return ctx
}

// watchPage collects what the page reports as wrong: uncaught exceptions
// and Content-Security-Policy violations. The answers 401 to the page's
// requests before the token is typed are expected and not collected.
func watchPage(t *testing.T, ctx context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var problems []string
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		var p string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			p = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				p += " " + e.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			if strings.Contains(e.Entry.Text, "Content Security Policy") || strings.Contains(e.Entry.Text, "Trusted Type") {
				p = "policy: " + e.Entry.Text
			}
		}
		if p != "" {
			mu.Lock()
			problems = append(problems, p)
			mu.Unlock()
		}
	}))
	_, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{})
	require.NoError(t, err)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// waitFor waits until the CSS selector matches an element of the page.
func waitFor(t *testing.T, ctx context.Context, selector, msg string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, uiWait)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.WaitReady(chromedp.CSS(selector))); err != nil {
		t.Fatalf("%s (waiting for %s): %v", msg, selector, err)
	}
}

// waitTrue waits until a JavaScript expression is true in the page.
func waitTrue(t *testing.T, ctx context.Context, expr, msg string) {
	t.Helper()
	deadline := time.Now().Add(uiWait)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (waiting for %s): %v", msg, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// evalJS evaluates a JavaScript expression in the page.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// saveScreenshot writes the whole page as dashboard.png into
// SLUICE_ARTIFACTS_DIR (or a temporary directory) and logs where.
func saveScreenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := os.Getenv("SLUICE_ARTIFACTS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "dashboard.png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("dashboard screenshot: %s", path)
}

// startTokenStack is start for a stack in token mode: readiness and the
// workers' announcements are checked with the test tenant's token.
func startTokenStack(t *testing.T, o Options, extra map[string]string) *bundle {
	t.Helper()
	dataDir := t.TempDir()
	// The dashboard's tenant is the operator (it sees the workers) unless
	// the test says otherwise.
	extra = maps.Clone(extra)
	if _, ok := extra["SLUICE_GATEWAY_OPERATOR_TENANTS"]; !ok {
		extra["SLUICE_GATEWAY_OPERATOR_TENANTS"] = dashTenant
	}
	// The page lives within the default read rate limit.
	if _, ok := extra["SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ"]; !ok {
		extra["SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ"] = "200"
	}
	o.Environ = testEnv(dataDir, extra)
	o.Log = testLog()
	b := run(t, dataDir, o)
	s := b.stack
	if extra["SLUICE_GATEWAY_OPERATOR_TENANTS"] != dashTenant {
		// Only the operator's stats show the workers: wait for readiness
		// alone; jobs wait for the workers in the store.
		require.Eventually(t, func() bool {
			status, _ := b.tokenDo(t, http.MethodGet, "/readyz", "")
			return status == http.StatusOK
		}, 20*time.Second, 20*time.Millisecond, "stack never ready")
		return b
	}
	require.Eventually(t, func() bool {
		status, body := b.tokenDo(t, http.MethodGet, "/v1/stats", "")
		if status != http.StatusOK {
			return false
		}
		var st contracts.Stats
		return json.Unmarshal([]byte(body), &st) == nil && len(st.Workers) == len(s.Workers)
	}, 20*time.Second, 20*time.Millisecond, "stack never ready with every worker announced")
	return b
}

// tokenDo sends a request as the dashboard test's tenant.
func (b *bundle) tokenDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+dashToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(data)
}

// tokenSubmit submits a job as the test's tenant, requires a 202 and
// returns the job's id.
func (b *bundle) tokenSubmit(t *testing.T, body string) string {
	t.Helper()
	status, out := b.tokenDo(t, http.MethodPost, "/v1/jobs", body)
	require.Equal(t, http.StatusAccepted, status, out)
	var j contracts.Job
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	return j.ID
}
