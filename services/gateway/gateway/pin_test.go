package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// pinRoots sets SLUICE_PIN_ROOTS.
func pinRoots(dirs ...string) option { return func(c *gateway.Config) { c.PinRoots = dirs } }

// pinMax sets SLUICE_GATEWAY_MAX_PIN_BYTES.
func pinMax(n int64) option { return func(c *gateway.Config) { c.MaxPinBytes = n } }

// pinBody is a submit whose one input pins the file at path.
func pinBody(path string) string {
	return fmt.Sprintf(`{"kind":"a","inputs":[{"name":"ref","uri":"file://%s","sha256":"pin"}]}`, path)
}

// pinTree is a pin root holding a file, a FIFO and a link out of it, and
// a secret outside it.
type pinTree struct{ root, secret string }

func newPinTree(t *testing.T) pinTree {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "pins")
	require.NoError(t, os.Mkdir(root, 0o755))
	secret := filepath.Join(base, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("the gateway's own secret\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "ref.txt"), []byte("reference v1\n"), 0o644))
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "escape")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	return pinTree{root: root, secret: secret}
}

// TestPinOutsideRootsRefused: with no SLUICE_PIN_ROOTS pinning is off, and
// with roots only regular files under them are hashed; a file outside,
// a missing one, a link out of a root and a FIFO all get the same 422,
// which tells nothing of the file (no OS error, no existence).
func TestPinOutsideRootsRefused(t *testing.T) {
	t.Parallel()
	tr := newPinTree(t)
	off := setup(t)
	on := setup(t, pinRoots(tr.root))

	refused := func(b *bundle, path string) string {
		t.Helper()
		// A FIFO must not hang the open: the request ends within the
		// test's deadline either way.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan response, 1)
		go func() { done <- b.submit(tokenA, pinBody(path)) }()
		var got response
		select {
		case got = <-done:
		case <-ctx.Done():
			t.Fatalf("pinning %s did not answer", path)
		}
		e := got.requireError(t, http.StatusUnprocessableEntity, contracts.CodeValidation)
		require.NotContains(t, e.Message, path)
		for _, leak := range []string{"no such file", "permission", "denied", "not a regular", "root:"} {
			require.NotContains(t, strings.ToLower(e.Message), leak)
		}
		return e.Message
	}
	before := on.snap()
	want := refused(off, "/etc/passwd")
	require.Contains(t, want, "SLUICE_PIN_ROOTS", "the message says what governs pinning")
	for _, b := range []*bundle{off, on} {
		for _, path := range []string{
			"/etc/passwd", "/etc/shadow", "/proc/self/environ", "/no/such/file", tr.secret,
			filepath.Join(tr.root, "missing"), filepath.Join(tr.root, "escape"), filepath.Join(tr.root, "fifo"),
			tr.root + "/../secret", tr.root,
		} {
			require.Equal(t, want, refused(b, path), "%s: one message for not allowed and not found", path)
		}
	}
	// Over NATS as over HTTP: the same refusal.
	for _, b := range []*bundle{off, on} {
		reply := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, pinBody("/etc/passwd"))
		require.Equal(t, http.StatusUnprocessableEntity, reply.Status)
		require.Equal(t, want, reply.Error.Message)
	}
	require.Equal(t, before, on.snap(), "refused pins wrote nothing")

	// A regular file under the root pins fine, also through an unclean path.
	sum := sha256.Sum256([]byte("reference v1\n"))
	for _, path := range []string{filepath.Join(tr.root, "ref.txt"), tr.root + "/./x/../ref.txt"} {
		got := on.submit(tokenA, pinBody(path))
		require.Equal(t, http.StatusAccepted, got.status, string(got.body))
		require.Equal(t, hex.EncodeToString(sum[:]), got.job(t).Inputs[0].SHA256)
	}
	got := off.submit(tokenA, pinBody(filepath.Join(tr.root, "ref.txt")))
	require.Equal(t, want, got.requireError(t, http.StatusUnprocessableEntity, contracts.CodeValidation).Message,
		"no roots: pinning is off")
}

// TestPinEndlessFileBounded: a size-0 /proc file that reads on for
// hundreds of GiB under an allowed root is cut by SLUICE_GATEWAY_MAX_PIN_BYTES,
// and the hash stops when the client leaves.
func TestPinEndlessFileBounded(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/pagemap"); err != nil {
		t.Skip("no /proc/self/pagemap here")
	}
	pagemapMu.Lock() // TestPinShutdownDoesNotWait watches this process's pagemap opens
	defer pagemapMu.Unlock()
	bounded := setup(t, pinRoots("/proc"), pinMax(1<<20))
	got := bounded.submit(tokenA, pinBody("/proc/self/pagemap"))
	e := got.requireError(t, http.StatusUnprocessableEntity, contracts.CodeValidation)
	require.Contains(t, e.Message, "SLUICE_GATEWAY_MAX_PIN_BYTES")

	// The bound far away: only the request's context ends the hash.
	b := setup(t, pinRoots("/proc"), pinMax(1<<40))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/jobs", strings.NewReader(pinBody("/proc/self/pagemap")))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+tokenA)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); b.gws[0].gw.Handler().ServeHTTP(rec, r) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the hash went on after the client left")
	}
	require.NotEqual(t, http.StatusAccepted, rec.Code)
}

// TestPinShutdownDoesNotWait: a gateway stopping with a hash under way
// (an endless /proc file, a far bound, a client that stays) stops it
// instead of waiting SLUICE_SHUTDOWN_TIMEOUT for it.
func TestPinShutdownDoesNotWait(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/pagemap"); err != nil {
		t.Skip("no /proc/self/pagemap here")
	}
	pagemapMu.Lock() // an open pagemap must be this test's hash
	defer pagemapMu.Unlock()
	require.False(t, pagemapOpen(t))
	b := setup(t, pinRoots("/proc"), pinMax(1<<40), func(c *gateway.Config) { c.ShutdownTimeout = time.Hour })
	gw, err := gateway.New(b.cfg, gateway.Deps{Store: b.openStore(), NC: b.connect(), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()

	// The client reports instead of failing the test from its goroutine, so
	// a lost answer is a failure here and never a test that waits forever.
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		hr, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/jobs",
			strings.NewReader(pinBody("/proc/self/pagemap")))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Authorization", "Bearer "+tokenA)
		res, err := http.DefaultClient.Do(hr)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		answered <- answer{status: res.StatusCode}
	}()
	waitUntil(t, func() bool { return pagemapOpen(t) }) // the hash is under way
	stop()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("shutdown waited on a hash")
	}
	select {
	case got := <-answered:
		require.NoError(t, got.err, "the client had no answer")
		require.Equal(t, http.StatusServiceUnavailable, got.status)
	case <-time.After(30 * time.Second):
		t.Fatal("the client had no answer after the gateway stopped")
	}
}

// pagemapMu keeps the tests that hash /proc/self/pagemap apart: one of
// them knows its hash is under way by this process holding a pagemap open.
var pagemapMu sync.Mutex

// pagemapOpen reports whether this process holds a pagemap file open.
func pagemapOpen(t *testing.T) bool {
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasSuffix(target, "/pagemap") {
			return true
		}
	}
	return false
}

// TestPinTenantShareOverHTTPAndNATS: while a tenant's pin is being hashed
// (an endless /proc file, paced), its next pin that must read a file is a
// 429 naming tenant_pins with a Retry-After, over HTTP and NATS alike,
// counted in /v1/stats and the metrics, and another tenant's pin is
// admitted; once the first pin ends, the tenant pins again.
func TestPinTenantShareOverHTTPAndNATS(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/pagemap"); err != nil {
		t.Skip("no /proc/self/pagemap here")
	}
	pagemapMu.Lock() // an open pagemap must be this test's hash
	defer pagemapMu.Unlock()
	require.False(t, pagemapOpen(t))
	tr := newPinTree(t)
	other := filepath.Join(tr.root, "other.txt")
	require.NoError(t, os.WriteFile(other, []byte("other\n"), 0o644))
	b := setup(t, pinRoots("/proc", tr.root), pinMax(1<<40))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/jobs", strings.NewReader(pinBody("/proc/self/pagemap")))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+tokenA)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); b.gws[0].gw.Handler().ServeHTTP(rec, r) }()
	waitUntil(t, func() bool { return pagemapOpen(t) }) // acme's hash is under way

	got := b.submit(tokenA, pinBody(filepath.Join(tr.root, "ref.txt")))
	e := got.requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)
	require.Equal(t, contracts.LimitTenantPins, e.Limit)
	require.Contains(t, e.Message, "SLUICE_GATEWAY_TENANT_MAX_PINS")
	require.Equal(t, "2", got.header.Get("Retry-After"), "SLUICE_GATEWAY_RETRY_AFTER, rounded up")
	reply := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, pinBody(other))
	require.Equal(t, http.StatusTooManyRequests, reply.Status)
	require.Equal(t, contracts.LimitTenantPins, reply.Error.Limit)
	require.Positive(t, reply.RetryAfterMS)

	got = b.submit(tokenB, pinBody(filepath.Join(tr.root, "ref.txt")))
	require.Equal(t, http.StatusAccepted, got.status, "another tenant's pin goes through: %s", got.body)

	require.Equal(t, []string{contracts.LimitTenantPins, contracts.LimitTenantPins}, limits(b.stats(tokenA).RecentRejections))
	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="tenant_pins",outcome="rejected"} 2`)

	cancel()
	<-done
	require.NotEqual(t, http.StatusAccepted, rec.Code)
	got = b.submit(tokenA, pinBody(other))
	require.Equal(t, http.StatusAccepted, got.status, "the place is given back: %s", got.body)
}
