package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// get sends one request to a fresh handler.
func get(t *testing.T, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	New().ServeHTTP(rec, r)
	return rec
}

func requireSecurityHeaders(t *testing.T, h http.Header) {
	t.Helper()
	require.Equal(t, ContentSecurityPolicy, h.Get("Content-Security-Policy"))
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
	require.Equal(t, "no-referrer", h.Get("Referrer-Policy"))
}

func TestPage(t *testing.T) {
	t.Parallel()
	rec := get(t, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	requireSecurityHeaders(t, rec.Header())
	body := rec.Body.String()
	require.Contains(t, body, "<title>Sluice</title>")
	// Everything it loads comes from the gateway itself, and every asset
	// it names is served.
	for _, a := range New().Assets() {
		require.Contains(t, body, `"`+a+`"`, "the page does not use %s", a)
	}
	require.NotContains(t, body, "http://")
	require.NotContains(t, body, "https://")
	require.NotContains(t, body, "<style", "inline style is blocked by the policy")
	require.NotContains(t, body, " style=", "inline style is blocked by the policy")
	require.Equal(t, 1, strings.Count(body, "<script"), "one script, from a file")
	require.Contains(t, body, `<script src="/dashboard/app.js" defer></script>`)
}

func TestPolicyIsStrict(t *testing.T) {
	t.Parallel()
	p := ContentSecurityPolicy
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'",
		"connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "require-trusted-types-for 'script'"} {
		require.Contains(t, p, want)
	}
	for _, never := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:", "https:"} {
		require.NotContains(t, p, never)
	}
}

func TestAssets(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		AssetPrefix + "app.js":   "text/javascript; charset=utf-8",
		AssetPrefix + "app.css":  "text/css; charset=utf-8",
		AssetPrefix + "icon.svg": "image/svg+xml",
	}
	require.ElementsMatch(t, keys(want), New().Assets())
	for path, ct := range want {
		rec := get(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.Equal(t, ct, rec.Header().Get("Content-Type"), path)
		requireSecurityHeaders(t, rec.Header())
		require.NotZero(t, rec.Body.Len(), path)
		require.NotEmpty(t, rec.Header().Get("ETag"), path)

		// A client holding the same version gets 304 and no body.
		again := get(t, http.MethodGet, path, map[string]string{"If-None-Match": rec.Header().Get("ETag")})
		require.Equal(t, http.StatusNotModified, again.Code, path)
		require.Zero(t, again.Body.Len())

		head := get(t, http.MethodHead, path, nil)
		require.Equal(t, http.StatusOK, head.Code, path)
		require.Zero(t, head.Body.Len())
	}
	js := get(t, http.MethodGet, AssetPrefix+"app.js", nil).Body.String()
	// Trusted Types are enforced: the script never assigns HTML.
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		require.NotContains(t, js, sink)
	}
	require.NotContains(t, js, "http://")
	require.NotContains(t, js, "https://")
}

func TestUnknownPathsAreJSON404(t *testing.T) {
	t.Parallel()
	for _, p := range []string{AssetPrefix + "nope.js", AssetPrefix + "index.html", AssetPrefix, "/other"} {
		rec := get(t, http.MethodGet, p, nil)
		require.Equal(t, http.StatusNotFound, rec.Code, p)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"), p)
		body, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		require.JSONEq(t, `{"error":{"code":"not_found","message":"no such route"}}`, string(body))
	}
}

func TestLoadChecksTheFiles(t *testing.T) {
	t.Parallel()
	_, err := load(fstest.MapFS{"static/app.js": {Data: []byte("x")}})
	require.ErrorContains(t, err, "index.html is missing")
	_, err = load(fstest.MapFS{"static/index.html": {Data: []byte("x")}, "static/data.bin": {Data: []byte("x")}})
	require.ErrorContains(t, err, "unknown content type")
	h, err := load(fstest.MapFS{"static/index.html": {Data: []byte("x")}, "static/a.css": {Data: []byte("y")}})
	require.NoError(t, err)
	require.Equal(t, []string{AssetPrefix + "a.css"}, h.Assets())
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
