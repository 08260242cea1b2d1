package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// openAPIDoc is the part of the OpenAPI document the sync test reads.
type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
}

type openAPIOperation struct {
	OperationID string                     `json:"operationId"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

// servedRoute turns a ServeMux pattern into the OpenAPI "METHOD path" form.
func servedRoute(pattern string) string {
	method, path, _ := strings.Cut(pattern, " ")
	return method + " " + strings.TrimSuffix(path, "{$}")
}

func TestOpenAPIDescribesEveryRouteAndEveryDescribedRouteAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, openMode())

	res := b.do(req{method: http.MethodGet, path: "/openapi.json"})
	require.Equal(t, http.StatusOK, res.status)
	require.Equal(t, "application/json", res.header.Get("Content-Type"))
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(res.body, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)

	var described []string
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			described = append(described, strings.ToUpper(method)+" "+path)
			require.NotEmpty(t, op.OperationID, "%s %s has no operationId", method, path)
			require.False(t, ids[op.OperationID], "operationId %s used twice", op.OperationID)
			ids[op.OperationID] = true
			require.NotEmpty(t, op.Responses, "%s %s lists no responses", method, path)
		}
	}
	var served []string
	for _, p := range gateway.Routes(b.gws[0].gw) {
		served = append(served, servedRoute(p))
	}
	sort.Strings(described)
	sort.Strings(served)
	require.Equal(t, served, described, "the router and /openapi.json disagree")

	// A wrong method is the documented 405, with the JSON error body.
	r := b.do(req{method: http.MethodPost, path: "/healthz"})
	r.requireError(t, http.StatusMethodNotAllowed, contracts.CodeMethodNotAllowed)
	_, listed := doc.Paths["/healthz"]["get"].Responses["405"]
	require.True(t, listed, "GET /healthz documents its 405")

	// Every described operation answers, with a status the document lists
	// for it, never the router's own 404 or 405.
	job := b.submit("", `{"kind":"sleep"}`).job(t)
	for path, ops := range doc.Paths {
		for method, op := range ops {
			method = strings.ToUpper(method)
			url := strings.NewReplacer("{id}", job.ID, "{file}", "app.js").Replace(path)
			status := answer(t, b.gws[0].srv.URL, method, url)
			require.NotEqual(t, http.StatusMethodNotAllowed, status, "%s %s", method, url)
			_, listed := op.Responses[strconv.Itoa(status)]
			require.True(t, listed, "%s %s answered %d, which the document does not list", method, url, status)
		}
	}
}

// answer sends one request and returns its status. Event streams do not
// end by themselves, so only their headers are read.
func answer(t *testing.T, base, method, path string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var body *strings.Reader
	if method == http.MethodPost && path == "/v1/jobs" {
		body = strings.NewReader(`{"kind":"sleep","payload":{"ms":1}}`)
	} else {
		body = strings.NewReader("")
	}
	r, err := http.NewRequestWithContext(ctx, method, base+path, body)
	require.NoError(t, err)
	if body.Len() > 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		require.NotEqual(t, "no such route", e.Error.Message, "%s %s is described but not routed", method, path)
	}
	return resp.StatusCode
}
