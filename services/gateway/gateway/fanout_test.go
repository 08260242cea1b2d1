package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// hardItems are fan-out items (and payloads) that a decoder into float64
// or a store's JSON functions would change, each as a tenant might send it
// (spaced) and as it must come back (compact, every number and string as
// written).
var hardItems = []struct{ sent, kept string }{
	{`12345678901234567890`, `12345678901234567890`},
	{`-0`, `-0`},
	{`123456789012345678901234567890123456789`, `123456789012345678901234567890123456789`},
	{`1.5e300`, `1.5e300`},
	{`{ "a" : 1e-7 , "b" : "\u00e9" }`, `{"a":1e-7,"b":"\u00e9"}`},
	{"[ [1, [2.50, [-0.0]]],\n [] ]", `[[1,[2.50,[-0.0]]],[]]`},
	{`1e400`, `1e400`},
	{`-1E-400`, `-1E-400`},
	{"\"<&> \u2028 \\/ \\ud83d\\ude00\"", "\"<&> \u2028 \\/ \\ud83d\\ude00\""},
}

// rawPayload is the payload of a job answer, as the bytes it holds.
func rawPayload(tb testing.TB, body []byte) string {
	tb.Helper()
	var j struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(tb, json.Unmarshal(body, &j), string(body))
	return string(j.Payload)
}

// TestFanoutItemsKeptAsSubmitted: each child's payload, read alone or
// listed under its parent, is its item as submitted (compacted); so is a
// plain job's payload; no read of any of them fails.
func TestFanoutItemsKeptAsSubmitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent := make([]string, len(hardItems))
	for i, it := range hardItems {
		sent[i] = it.sent
	}
	r := b.submit(tokenA, `{"kind":"items","concurrency":2,"items":[`+strings.Join(sent, " , ")+`]}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	p := r.job(t)

	for i, it := range hardItems {
		got := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + contracts.ChildID(p.ID, i), token: tokenA})
		require.Equal(t, http.StatusOK, got.status, "child %d: %s", i, got.body)
		require.Equal(t, it.kept, rawPayload(t, got.body), "child %d", i)
	}
	q := url.Values{"parent": {p.ID}, "limit": {"4"}}
	seen := 0
	for {
		page := b.do(req{method: http.MethodGet, path: "/v1/jobs?" + q.Encode(), token: tokenA})
		require.Equal(t, http.StatusOK, page.status, string(page.body))
		var jp struct {
			Jobs []struct {
				Index   *int            `json:"index"`
				Payload json.RawMessage `json:"payload"`
			} `json:"jobs"`
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(page.body, &jp))
		for _, c := range jp.Jobs {
			require.NotNil(t, c.Index)
			require.Equal(t, hardItems[*c.Index].kept, string(c.Payload), "listed child %d", *c.Index)
			seen++
		}
		if jp.NextCursor == "" {
			break
		}
		q.Set("cursor", jp.NextCursor)
	}
	require.Equal(t, len(hardItems), seen)

	for _, it := range hardItems {
		r := b.submit(tokenA, `{"kind":"plain","payload":`+it.sent+`}`)
		require.Equal(t, http.StatusAccepted, r.status, string(r.body))
		require.Equal(t, it.kept, rawPayload(t, r.body), "submit answer")
		got := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + r.job(t).ID, token: tokenA})
		require.Equal(t, http.StatusOK, got.status, string(got.body))
		require.Equal(t, it.kept, rawPayload(t, got.body))
	}
	all := b.do(req{method: http.MethodGet, path: "/v1/jobs?limit=500", token: tokenA})
	require.Equal(t, http.StatusOK, all.status, string(all.body))
}

// TestFanoutItemNotUTF8 is refused at submit, naming the item, over HTTP
// and NATS, and nothing is written.
func TestFanoutItemNotUTF8(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.snap()
	body := "{\"kind\":\"items\",\"items\":[{\"ok\":1},\"caf\xe9\"]}"
	e := b.submit(tokenA, body).requireError(t, http.StatusUnprocessableEntity, contracts.CodeValidation)
	require.Contains(t, e.Message, "items[1]")
	require.Contains(t, e.Message, "UTF-8")
	reply := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, body)
	require.Equal(t, http.StatusUnprocessableEntity, reply.Status)
	require.Contains(t, reply.Error.Message, "items[1]")
	require.Equal(t, before, b.snap(), "a refused fan-out wrote something")
}
