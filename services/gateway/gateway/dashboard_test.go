package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDashboardServed: GET / is the dashboard page, with its strict
// Content-Security-Policy, in token mode too (the page asks for the token
// itself); its assets are served; everything else stays a JSON API.
func TestDashboardServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	page := b.do(req{method: http.MethodGet, path: "/"})
	require.Equal(t, http.StatusOK, page.status, string(page.body))
	require.Equal(t, "text/html; charset=utf-8", page.header.Get("Content-Type"))
	csp := page.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	require.Equal(t, "nosniff", page.header.Get("X-Content-Type-Options"))
	require.Contains(t, string(page.body), "<title>Sluice</title>")

	for path, ct := range map[string]string{
		"/dashboard/app.js":   "text/javascript; charset=utf-8",
		"/dashboard/app.css":  "text/css; charset=utf-8",
		"/dashboard/icon.svg": "image/svg+xml",
	} {
		r := b.do(req{method: http.MethodGet, path: path})
		require.Equal(t, http.StatusOK, r.status, path)
		require.Equal(t, ct, r.header.Get("Content-Type"), path)
		require.Equal(t, csp, r.header.Get("Content-Security-Policy"), path)
		require.True(t, strings.Contains(string(page.body), `"`+path+`"`), "the page does not load %s", path)
	}

	// Only "/" itself is the page; the API's own answers keep their JSON.
	for _, p := range []string{"/index.html", "/dashboard/", "/dashboard/missing.js", "/dashboard/app.js/x"} {
		b.do(req{method: http.MethodGet, path: p}).requireError(t, http.StatusNotFound, "not_found")
	}
	b.do(req{method: http.MethodPost, path: "/"}).requireError(t, http.StatusMethodNotAllowed, "method_not_allowed")
	r := b.do(req{method: http.MethodGet, path: "/v1/stats", token: tokenA})
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Empty(t, r.header.Get("Content-Security-Policy"))
}
