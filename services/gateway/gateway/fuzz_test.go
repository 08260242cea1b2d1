package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// FuzzSubmitHTTP throws arbitrary bodies at POST /v1/jobs through the whole
// handler: the answer is never a 5xx, never a panic, and always JSON; and
// what is admitted reads back (the job, a fan-out's children) without a
// 5xx.
func FuzzSubmitHTTP(f *testing.F) {
	b := setup(f, openMode(), caps(0, 0), maxBody(4096))
	h := b.gws[0].gw.Handler()
	for _, seed := range []string{
		`{"kind":"a"}`,
		`{"kind":"thumb","payload":{"x":[1,2,{"y":null}]},"key":"k-1","priority":9,"max_attempts":100,"deadline":"5m"}`,
		`{"kind":"a","deadline":"2099-01-01T00:00:00Z"}`,
		`{"kind":"a","items":[],"concurrency":0}`,
		`{"kind":"a","payload":"\u0000\ud800"}`,
		`{"kind":"a","key":"\u2028\u2029"}`,
		`{"kind":"a","priority":-0}`,
		`{"kind":"a","priority":1e2}`,
		`{"kind":"a"}{}`,
		`{"kind":"a",}`,
		`{"kind" : "a" , "payload" : [[[[[[[[[[]]]]]]]]]] }`,
		`[[[[[[[[`,
		`{`,
		``,
		"\x00",
		"\xef\xbb\xbf{\"kind\":\"a\"}",
		`{"kind":"a","payload":1e999}`,
		`{"kind":"a","max_attempts":9223372036854775808}`,
		`{"KIND":"a"}`,
		`{"kind":"a","items":[12345678901234567890, -0, 123456789012345678901234567890123456789, 1.5e300]}`,
		`{"kind":"a","items":[1e400, -1e400, {"a":1e-7,"b":"\u00e9"}, [[1,[2.50]],[]]],"concurrency":2}`,
		"{\"kind\":\"a\",\"items\":[\"\xff\"]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/jobs", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %q", rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e contracts.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("status %d without an error body: %s", rec.Code, rec.Body.Bytes())
			}
		}
		if rec.Code != http.StatusAccepted {
			return
		}
		var j contracts.Job
		if err := json.Unmarshal(rec.Body.Bytes(), &j); err != nil {
			t.Fatalf("admitted, but the answer is not a job: %s", rec.Body.Bytes())
		}
		reads := []string{"/v1/jobs/" + j.ID}
		if j.IsParent() {
			reads = append(reads, "/v1/jobs?limit=500&parent="+j.ID, "/v1/jobs/"+contracts.ChildID(j.ID, 0))
		}
		for _, path := range reads {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("admitted %q, then GET %s answered %d: %s", body, path, rec.Code, rec.Body.Bytes())
			}
		}
	})
}
