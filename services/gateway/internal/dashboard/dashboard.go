// Package dashboard is the gateway's live dashboard: one page at "/" and
// its script, style sheet and icon under AssetPrefix, all embedded in the
// binary. There is no build step and the page makes no request outside the
// gateway, so it works offline.
//
// The page is a client of the HTTP API v1 like any other: it reads GET
// /v1/stats every second, GET /v1/jobs once, then follows the tenant's
// event stream (GET /v1/events) and cancels with POST
// /v1/jobs/{id}/cancel. In token mode it sends the token the user typed
// (kept in the browser's localStorage) as a bearer token, so the page and
// its assets themselves need none.
//
// Every answer carries a strict Content-Security-Policy: scripts, styles,
// images and connections from the gateway's own origin only, no inline
// code, no framing, and Trusted Types enforced (the script builds the page
// with DOM methods, never with HTML strings).
package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// AssetPrefix is the path under which the page's assets are served: the
// router registers "GET /{$}" and "GET "+AssetPrefix+"{file}".
const AssetPrefix = "/dashboard/"

// ContentSecurityPolicy is the Content-Security-Policy of the page and
// its assets.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'"

// indexFile is the page among the embedded files; the others are assets.
const indexFile = "index.html"

// contentTypes maps the embedded files' extensions to their types (fixed
// here rather than read from the system's MIME tables, which differ).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

//go:embed static
var static embed.FS

// file is one embedded file ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the page at "/" and the assets under AssetPrefix; any
// other path is a JSON 404.
type Handler struct {
	page   file
	assets map[string]file
}

// New returns the dashboard handler. It reads the embedded files once; a
// file that cannot be read is a build defect, so it panics.
func New() *Handler {
	h, err := load(static)
	if err != nil {
		panic(fmt.Sprintf("dashboard: %v", err))
	}
	return h
}

// load reads every file under static/ of fsys.
func load(fsys fs.FS) (*Handler, error) {
	sub, err := fs.Sub(fsys, "static")
	if err != nil {
		return nil, fmt.Errorf("open embedded files: %w", err)
	}
	entries, err := fs.ReadDir(sub, ".")
	if err != nil {
		return nil, fmt.Errorf("list embedded files: %w", err)
	}
	h := &Handler{assets: map[string]file{}}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		body, err := fs.ReadFile(sub, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read embedded %s: %w", e.Name(), err)
		}
		ct := contentTypes[path.Ext(e.Name())]
		if ct == "" {
			return nil, fmt.Errorf("embedded %s: unknown content type", e.Name())
		}
		sum := sha256.Sum256(body)
		f := file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		if e.Name() == indexFile {
			h.page = f
		} else {
			h.assets[e.Name()] = f
		}
	}
	if h.page.body == nil {
		return nil, fmt.Errorf("embedded %s is missing", indexFile)
	}
	return h, nil
}

// Assets lists the paths of the embedded assets (not the page).
func (h *Handler) Assets() []string {
	out := make([]string, 0, len(h.assets))
	for name := range h.assets {
		out = append(out, AssetPrefix+name)
	}
	return out
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var f file
	switch p := r.URL.Path; {
	case p == "/":
		f = h.page
	case strings.HasPrefix(p, AssetPrefix):
		var ok bool
		if f, ok = h.assets[strings.TrimPrefix(p, AssetPrefix)]; !ok {
			notFound(w)
			return
		}
	default:
		notFound(w)
		return
	}
	hd := w.Header()
	setSecurityHeaders(hd)
	hd.Set("Content-Type", f.contentType)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
		hd.Del("Content-Type")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body)
	}
}

// setSecurityHeaders sets the headers of every dashboard answer.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// notFound answers the API's JSON 404.
func notFound(w http.ResponseWriter) {
	body, _ := json.Marshal(contracts.ErrorBody{Error: contracts.ErrorDetail{
		Code: contracts.CodeNotFound, Message: "no such route",
	}})
	hd := w.Header()
	setSecurityHeaders(hd)
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(append(body, '\n'))
}
