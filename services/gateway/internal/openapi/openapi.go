// Package openapi serves the OpenAPI 3.1 description of the gateway's HTTP
// API (GET /openapi.json). The document is written by hand and embedded; a
// test in the gateway keeps it and the router in step: every route the
// router serves is described, and every described operation answers.
package openapi

import (
	_ "embed"
	"net/http"
)

// Document is the OpenAPI 3.1 document, as served.
//
//go:embed openapi.json
var Document []byte

// Handler serves Document as application/json.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(Document)
	})
}
