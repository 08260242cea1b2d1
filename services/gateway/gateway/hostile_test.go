package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// noType asks for a request without a Content-Type header.
const noType = "-"

// hostile is one malformed or hostile request and the answer it must get.
type hostile struct {
	name   string
	method string
	path   string
	token  string // bearer token; "" = none
	body   string
	ctype  string      // "" = application/json when there is a body; noType = none
	header [][2]string // raw headers, added as they are (CR/LF included)
	stream bool        // hide the body's length
	status int
	code   string
	limit  string // the limit the error must name; "" = not checked
	msg    string // what the error's message must say; "" = not checked
}

// TestHostileRequests sends malformed and hostile requests straight to the
// handler (so headers the HTTP client would refuse get through) and checks
// each gets the right 4xx with a JSON error body and writes nothing.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.submit(tokenB, `{"kind":"secret","key":"b-only"}`)
	require.Equal(t, http.StatusAccepted, other.status)
	otherID := other.job(t).ID
	mine := b.submit(tokenA, `{"kind":"mine"}`)
	require.Equal(t, http.StatusAccepted, mine.status)
	// A worker of kind "big" with 2 cores and 4GiB (issue 26): once the
	// gateway's roster knows it, a request of kind "big" for more than it
	// has is refused.
	ann, err := json.Marshal(contracts.Announce{WorkerID: "w-big", Kinds: []string{"big"}, Capacity: 2, IntervalMS: 60000,
		Resources: &contracts.Resources{CPU: 2, Memory: 4 << 30}, FreeResources: &contracts.Resources{CPU: 2, Memory: 4 << 30}})
	require.NoError(t, err)
	waitUntil(t, func() bool {
		require.NoError(t, b.nc.Publish(contracts.AnnounceSubject("w-big"), ann))
		return b.submit(tokenA, `{"kind":"big","resources":{"cpu":3}}`).status == http.StatusUnprocessableEntity
	})

	long := func(c byte, n int) string { return strings.Repeat(string(c), n) }
	sub := func(name, body string, status int, code string) hostile {
		return hostile{name: name, method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: body, status: status, code: code}
	}
	// said is a submit whose error message must say msg.
	said := func(name, body string, status int, code, msg string) hostile {
		h := sub(name, body, status, code)
		h.msg = msg
		return h
	}
	get := func(name, path string, status int, code string) hostile {
		return hostile{name: name, method: http.MethodGet, path: path, token: tokenA, status: status, code: code}
	}
	const (
		bad400 = http.StatusBadRequest
		bad422 = http.StatusUnprocessableEntity
	)
	inv, val, br := contracts.CodeInvalidJSON, contracts.CodeValidation, contracts.CodeBadRequest

	cases := []hostile{
		// Bodies that are not one JSON object of the right shape: 400.
		sub("truncated json", `{"kind":`, bad400, inv),
		sub("empty body", ``, bad400, inv),
		sub("whitespace body", "  \n\t ", bad400, inv),
		sub("array body", `[{"kind":"a"}]`, bad400, inv),
		sub("null body", `null`, bad400, inv),
		sub("string body", `"kind"`, bad400, inv),
		sub("kind of wrong type", `{"kind":5}`, bad400, inv),
		sub("kind as object", `{"kind":{"$ne":null}}`, bad400, inv),
		sub("unknown field", `{"kind":"a","evil":true}`, bad400, inv),
		sub("trailing garbage", `{"kind":"a"} rm -rf /`, bad400, inv),
		sub("two objects", `{"kind":"a"}{"kind":"b"}`, bad400, inv),
		sub("deep nesting", `{"kind":"a","payload":`+long('[', 20000)+long(']', 20000)+`}`, bad400, inv),
		sub("priority overflow", `{"kind":"a","priority":1e30}`, bad400, inv),
		sub("priority fraction", `{"kind":"a","priority":1.5}`, bad400, inv),
		sub("priority NaN", `{"kind":"a","priority":NaN}`, bad400, inv),
		sub("max_attempts as string", `{"kind":"a","max_attempts":"3"}`, bad400, inv),
		sub("huge int", `{"kind":"a","max_attempts":99999999999999999999999}`, bad400, inv),
		sub("invalid utf8 garbage", "\xff\xfe{\"kind\":\"a\"}", bad400, inv),
		// Decode errors speak of JSON fields and types, never of Go's.
		said("type error names the field", `{"kind":"a","priority":"9"}`, bad400, inv, "priority: expected an integer, got a string"),
		said("type error of an element names its index", `{"kind":"a","inputs":[{"name":"a","uri":"file:///x","sha256":"pin"},{"name":7}]}`,
			bad400, inv, "inputs[1].name: expected a string, got a number"),
		said("unknown field named", `{"kind":"a","tenant":"globex"}`, bad400, inv, "tenant: unknown field"),
		said("unknown field inside an element", `{"kind":"a","inputs":[{"name":"a","digest":"x"}]}`, bad400, inv, "inputs[0].digest: unknown field"),
		said("fraction for an integer", `{"kind":"a","max_attempts":2.5}`, bad400, inv, "max_attempts: expected an integer, got 2.5"),
		said("broken JSON says where", `{"kind":"a",}`, bad400, inv, "not valid JSON: invalid character '}' looking for beginning of object key string (at byte 13)"),
		{name: "batch envelope type error", method: http.MethodPost, path: "/v1/jobs/batch", token: tokenA, body: `{"jobs":{"kind":"a"}}`,
			status: bad400, code: inv, msg: "jobs: expected an array, got an object"},
		// Resource requests (issue 26): 422 naming the member.
		said("resources cpu negative", `{"kind":"a","resources":{"cpu":-1}}`, bad422, val, "resources.cpu: -1 is negative"),
		said("resources cpu absurd", `{"kind":"a","resources":{"cpu":1e9}}`, bad422, val, "resources.cpu: 1e+09 cores is more than 4096"),
		said("resources memory without a known unit", `{"kind":"a","resources":{"memory":"512MB"}}`, bad422, val, "resources.memory: \"512MB\" is not an amount of memory"),
		said("resources memory negative", `{"kind":"a","resources":{"memory":-5}}`, bad422, val, "resources.memory: -5 bytes is negative"),
		said("resources memory absurd", `{"kind":"a","resources":{"memory":"2048TiB"}}`, bad422, val, "resources.memory: \"2048TiB\" is more than"),
		said("resources unknown member", `{"kind":"a","resources":{"gpu":1}}`, bad422, val, "resources.gpu: unknown field"),
		said("resources of the wrong type", `{"kind":"a","resources":"2 cores"}`, bad422, val, "resources: expected an object, got a string"),
		said("resources cpu as a string", `{"kind":"a","resources":{"cpu":"2"}}`, bad422, val, "resources.cpu: expected a number, got a string"),
		said("resources more than any worker has", `{"kind":"big","resources":{"cpu":2,"memory":"8GiB"}}`, bad422, val,
			`resources: asks for cpu=2,memory=8GiB, more than any live worker of kind "big" has (the largest: cpu=2, memory=4GiB)`),
		said("fan-out resources more than any worker has", `{"kind":"big","items":[1,2],"resources":{"cpu":4}}`, bad422, val,
			"more than any live worker"),
		said("fan-out resources invalid", `{"kind":"a","items":[1,2],"resources":{"cpu":-2}}`, bad422, val, "resources.cpu: -2 is negative"),
		// Payloads of the built-in kinds their run would refuse: 422 naming the field.
		said("sleep for negative ms", `{"kind":"sleep","payload":{"ms":-1}}`, bad422, val, "payload.ms: must be between 0 and 86400000, got -1"),
		said("sleep for a day and more", `{"kind":"sleep","payload":{"ms":86400001}}`, bad422, val, "payload.ms: must be between 0 and 86400000"),
		said("sleep ms as a string", `{"kind":"sleep","payload":{"ms":"10"}}`, bad422, val, "payload.ms: expected an integer, got a string"),
		said("sleep with an unknown field", `{"kind":"sleep","payload":{"seconds":1}}`, bad422, val, "payload.seconds: unknown field"),
		said("exec without argv", `{"kind":"exec","payload":{"timeout":"1s"}}`, bad422, val, "payload.argv: is required"),
		said("exec without payload", `{"kind":"exec"}`, bad422, val, "payload: is required for kind exec"),
		said("exec argv as a string", `{"kind":"exec","payload":{"argv":"rm -rf /"}}`, bad422, val, "payload.argv: expected an array, got a string"),
		said("exec with a bad timeout", `{"kind":"exec","payload":{"argv":["echo"],"timeout":"forever"}}`, bad422, val, "payload.timeout: \"forever\" is not a Go duration"),
		said("exec with a loader variable", `{"kind":"exec","payload":{"argv":["echo"],"env":{"LD_PRELOAD":"/x.so"}}}`, bad422, val, "payload.env: \"LD_PRELOAD\" is not allowed"),
		said("sleep fan-out item", `{"kind":"sleep","items":[{"ms":1},{"ms":-1}]}`, bad422, val, "items[1].ms: must be between 0 and 86400000, got -1"),
		// Well-formed but invalid: 422.
		sub("missing kind", `{}`, bad422, val),
		sub("bad kind", `{"kind":"Bad Kind!"}`, bad422, val),
		sub("kind path traversal", `{"kind":"../../etc/passwd"}`, bad422, val),
		sub("kind too long", `{"kind":"`+long('k', 65)+`"}`, bad422, val),
		sub("kind invalid utf8", "{\"kind\":\"a\xff\"}", bad422, val),
		sub("negative priority", `{"kind":"a","priority":-1}`, bad422, val),
		sub("absurd priority", `{"kind":"a","priority":2147483647}`, bad422, val),
		sub("negative max_attempts", `{"kind":"a","max_attempts":-3}`, bad422, val),
		sub("absurd max_attempts", `{"kind":"a","max_attempts":100000}`, bad422, val),
		sub("key too long", `{"kind":"a","key":"`+long('k', contracts.MaxKeyLen+1)+`"}`, bad422, val),
		sub("key with NUL", `{"kind":"a","key":"a\u0000b"}`, bad422, val),
		sub("key header injection", `{"kind":"a","key":"a\r\nSet-Cookie: x=1"}`, bad422, val),
		sub("deadline words", `{"kind":"a","deadline":"yesterday"}`, bad422, val),
		sub("deadline in the past", `{"kind":"a","deadline":"2000-01-01T00:00:00Z"}`, bad422, val),
		sub("deadline past the max", `{"kind":"a","deadline":"1000h"}`, bad422, val),
		sub("negative deadline", `{"kind":"a","deadline":"-5s"}`, bad422, val),
		sub("fan-out without items", `{"kind":"a","concurrency":2}`, bad422, val),
		sub("fan-out items not an array", `{"kind":"a","items":{"a":1}}`, bad422, val),
		sub("fan-out window too wide", `{"kind":"a","items":[1],"concurrency":100000}`, bad422, val),
		// Pinning reads no file of the gateway's (no SLUICE_PIN_ROOTS here),
		// and a missing file is refused like any other.
		sub("pin /etc/passwd", pinBody("/etc/passwd"), bad422, val),
		sub("pin /proc/self/environ", pinBody("/proc/self/environ"), bad422, val),
		sub("pin a missing file", pinBody("/no/such/file"), bad422, val),
		sub("pin a dot-dot path", pinBody("/tmp/../etc/passwd"), bad422, val),
		sub("fan-out item not UTF-8", "{\"kind\":\"a\",\"items\":[1,\"\xff\"]}", bad422, val),
		sub("fan-out item with a surrogate in UTF-8", "{\"kind\":\"a\",\"items\":[{\"s\":\"\xed\xa0\x80\"}]}", bad422, val),
		sub("payload not UTF-8", "{\"kind\":\"a\",\"payload\":{\"s\":\"a\xc3\"}}", bad422, val),
		// More items than one request may hold (SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST).
		{name: "fan-out over the items per request", method: http.MethodPost, path: "/v1/jobs", token: tokenA,
			body: fanoutJSON(10000), status: http.StatusRequestEntityTooLarge, code: contracts.CodeTooLarge, limit: contracts.LimitRequestItems},
		{name: "fan-out items under an upper-case key", method: http.MethodPost, path: "/v1/jobs", token: tokenA,
			body: strings.Replace(fanoutJSON(10000), `"items"`, `"ITEMS"`, 1), status: http.StatusRequestEntityTooLarge, code: contracts.CodeTooLarge, limit: contracts.LimitRequestItems},
		{name: "batch of fan-outs over the items per request", method: http.MethodPost, path: "/v1/jobs/batch", token: tokenA,
			body: batchJSON(fanoutJSON(5000), fanoutJSON(5000)), status: http.StatusRequestEntityTooLarge, code: contracts.CodeTooLarge, limit: contracts.LimitRequestItems},
		// Size and media type.
		sub("payload over the body limit", `{"kind":"a","payload":"`+long('x', 1<<20)+`"}`, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge),
		{name: "streamed body over the limit", method: http.MethodPost, path: "/v1/jobs", token: tokenA,
			body: `{"kind":"a","payload":"` + long('x', 1<<20) + `"}`, stream: true,
			status: http.StatusRequestEntityTooLarge, code: contracts.CodeTooLarge},
		{name: "text/plain", method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"a"}`,
			ctype: "text/plain", status: http.StatusUnsupportedMediaType, code: contracts.CodeUnsupportedMedia},
		{name: "no content type", method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"a"}`,
			ctype: noType, status: http.StatusUnsupportedMediaType, code: contracts.CodeUnsupportedMedia},
		{name: "latin1 charset", method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"a"}`,
			ctype: "application/json; charset=latin1", status: http.StatusUnsupportedMediaType, code: contracts.CodeUnsupportedMedia},
		{name: "form encoded", method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `kind=a`,
			ctype: "application/x-www-form-urlencoded", status: http.StatusUnsupportedMediaType, code: contracts.CodeUnsupportedMedia},
		{name: "two content types", method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"a"}`,
			header: [][2]string{{"Content-Type", "text/html"}}, status: http.StatusUnsupportedMediaType, code: contracts.CodeUnsupportedMedia},
		// Credentials.
		{name: "missing token", method: http.MethodPost, path: "/v1/jobs", body: `{"kind":"a"}`,
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "wrong token", method: http.MethodPost, path: "/v1/jobs", token: "tok-acme-0123456788", body: `{"kind":"a"}`,
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "token prefix", method: http.MethodGet, path: "/v1/jobs", token: tokenA[:5],
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "basic auth", method: http.MethodGet, path: "/v1/jobs",
			header: [][2]string{{"Authorization", "Basic YWNtZTp0b2stYWNtZQ=="}},
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "token header injection", method: http.MethodGet, path: "/v1/jobs",
			header: [][2]string{{"Authorization", "Bearer " + tokenA + "\r\nX-Tenant: globex"}},
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "token with trailing words", method: http.MethodGet, path: "/v1/jobs",
			header: [][2]string{{"Authorization", "Bearer " + tokenA + " " + tokenB}},
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "two authorization headers", method: http.MethodGet, path: "/v1/jobs", token: tokenA,
			header: [][2]string{{"Authorization", "Bearer " + tokenB}},
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		{name: "stats without token", method: http.MethodGet, path: "/v1/stats",
			status: http.StatusUnauthorized, code: contracts.CodeUnauthorized},
		// Ids and paths.
		get("bad id characters", "/v1/jobs/not!valid", bad400, br),
		get("encoded path traversal", "/v1/jobs/..%2F..%2Fetc%2Fpasswd", bad400, br),
		get("encoded dot-dot", "/v1/jobs/%2e%2e", bad400, br),
		get("id too long", "/v1/jobs/"+long('a', 65), bad400, br),
		get("id with encoded NUL", "/v1/jobs/abc%00def", bad400, br),
		get("id with encoded CRLF", "/v1/jobs/abc%0d%0aSet-Cookie:x", bad400, br),
		get("another tenant's job", "/v1/jobs/"+otherID, http.StatusNotFound, contracts.CodeNotFound),
		get("unknown job", "/v1/jobs/0190a5d2-0000-7000-8000-000000000000", http.StatusNotFound, contracts.CodeNotFound),
		{name: "cancel another tenant's job", method: http.MethodPost, path: "/v1/jobs/" + otherID + "/cancel", token: tokenA,
			status: http.StatusNotFound, code: contracts.CodeNotFound},
		{name: "cancel bad id", method: http.MethodPost, path: "/v1/jobs/..%2F..%2Fx/cancel", token: tokenA,
			status: bad400, code: br},
		get("dot-dot path", "/v1/jobs/../stats", http.StatusNotFound, contracts.CodeNotFound),
		get("trailing slash", "/v1/jobs/", http.StatusNotFound, contracts.CodeNotFound),
		get("unknown route", "/v1/nope", http.StatusNotFound, contracts.CodeNotFound),
		get("unknown version", "/v2/jobs", http.StatusNotFound, contracts.CodeNotFound),
		{name: "wrong method", method: http.MethodDelete, path: "/v1/jobs", token: tokenA,
			status: http.StatusMethodNotAllowed, code: contracts.CodeMethodNotAllowed},
		{name: "wrong method on a job", method: http.MethodPut, path: "/v1/jobs/" + otherID, token: tokenA,
			status: http.StatusMethodNotAllowed, code: contracts.CodeMethodNotAllowed},
		{name: "get on cancel", method: http.MethodGet, path: "/v1/jobs/" + otherID + "/cancel", token: tokenA,
			status: http.StatusMethodNotAllowed, code: contracts.CodeMethodNotAllowed},
		// List parameters.
		get("limit zero", "/v1/jobs?limit=0", bad400, br),
		get("limit too large", "/v1/jobs?limit=501", bad400, br),
		get("limit negative", "/v1/jobs?limit=-1", bad400, br),
		get("limit not a number", "/v1/jobs?limit=ten", bad400, br),
		get("limit overflow", "/v1/jobs?limit=99999999999999999999", bad400, br),
		get("limit twice", "/v1/jobs?limit=1&limit=2", bad400, br),
		get("bad state", "/v1/jobs?state=bogus", bad400, br),
		get("state sql injection", "/v1/jobs?state=pending'%20OR%201=1--", bad400, br),
		get("bad kind filter", "/v1/jobs?kind=UPPER", bad400, br),
		get("bad cursor", "/v1/jobs?cursor=!!!", bad400, br),
		get("forged cursor", "/v1/jobs?cursor=Zm9v", bad400, br),
		get("huge cursor", "/v1/jobs?cursor="+long('A', 4096), bad400, br),
		get("malformed query", "/v1/jobs?%zz=1", bad400, br),
	}
	require.GreaterOrEqual(t, len(cases), 30)

	before := b.snap()
	h := b.gws[0].gw.Handler()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.stream {
					body = io.MultiReader(bytes.NewReader([]byte(tc.body)))
				}
			}
			r := httptest.NewRequest(tc.method, tc.path, body)
			if tc.stream {
				r.ContentLength = -1
			}
			switch {
			case tc.ctype == noType:
			case tc.ctype != "":
				r.Header.Set("Content-Type", tc.ctype)
			case tc.body != "" || tc.method == http.MethodPost:
				r.Header.Set("Content-Type", "application/json")
			}
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			for _, kv := range tc.header {
				r.Header.Add(kv[0], kv[1])
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			got := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
			e := got.requireError(t, tc.status, tc.code)
			if tc.limit != "" {
				require.Equal(t, tc.limit, e.Limit)
			}
			require.NotContains(t, e.Message, tokenA, "errors never echo tokens")
			if tc.msg != "" {
				require.Contains(t, e.Message, tc.msg)
			}
			for _, goTerm := range []string{"Go struct", "Go value", "unmarshal", "json:", "SubmitRequest", "of type"} {
				require.NotContains(t, e.Message, goTerm, "errors speak of JSON, not Go")
			}
			require.NotContains(t, string(got.body), "Set-Cookie: x")
			if tc.status == http.StatusUnauthorized {
				require.Equal(t, `Bearer realm="sluice"`, got.header.Get("WWW-Authenticate"))
			}
		})
	}
	require.Equal(t, before, b.snap(), "hostile requests wrote something")
}

// hostileFlood is one tenant flooding a shared resource: it first takes
// what it is allowed (warm requests, answered 200, event streams kept
// open), then its next request must be refused with status, code and the
// limit named, and nothing must be written.
type hostileFlood struct {
	name   string
	opt    option
	warm   []string // GET paths answered 200 first; streams stay open
	path   string   // the refused GET
	status int
	code   string
	limit  string
}

// TestHostileTenantFloods: a tenant that takes its whole share of event
// streams or of reads is refused with a 429 naming the limit, and the
// other tenant is not.
func TestHostileTenantFloods(t *testing.T) {
	t.Parallel()
	const events = "/v1/events"
	cases := []hostileFlood{
		{name: "event streams past the tenant's share", opt: streams(4, 2), warm: []string{events, events},
			path: events, status: http.StatusTooManyRequests, code: contracts.CodeTenantCap, limit: contracts.LimitTenantStreams},
		{name: "job stream past the tenant's share", opt: streams(4, 2), warm: []string{events, events},
			path: "/v1/jobs/{mine}/events", status: http.StatusTooManyRequests, code: contracts.CodeTenantCap, limit: contracts.LimitTenantStreams},
		{name: "job reads past the read rate", opt: readRateLimit(0.001, 2), warm: []string{"/v1/jobs/{mine}", "/v1/jobs/{mine}"},
			path: "/v1/jobs/{mine}", status: http.StatusTooManyRequests, code: contracts.CodeRateLimited, limit: contracts.LimitTenantReadRate},
		{name: "stats past the read rate", opt: readRateLimit(0.001, 2), warm: []string{"/v1/stats", "/v1/jobs"},
			path: "/v1/stats", status: http.StatusTooManyRequests, code: contracts.CodeRateLimited, limit: contracts.LimitTenantReadRate},
		{name: "event stream past the read rate", opt: readRateLimit(0.001, 2), warm: []string{"/v1/jobs", "/v1/jobs"},
			path: events, status: http.StatusTooManyRequests, code: contracts.CodeRateLimited, limit: contracts.LimitTenantReadRate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.opt)
			mine := b.submit(tokenA, `{"kind":"mine"}`).job(t).ID
			at := func(p string) string { return strings.ReplaceAll(p, "{mine}", mine) }
			before := b.snap()
			for _, p := range tc.warm {
				status, r, _ := b.openStream(at(p), tokenA)
				require.Equal(t, http.StatusOK, status, "%s: %s", p, r.body)
			}
			_, got, _ := b.openStream(at(tc.path), tokenA)
			e := got.requireError(t, tc.status, tc.code)
			require.Equal(t, tc.limit, e.Limit)
			require.NotEmpty(t, got.header.Get("Retry-After"))
			status, r, _ := b.openStream(events, tokenB)
			require.Equal(t, http.StatusOK, status, "the other tenant: %s", r.body)
			require.Equal(t, before, b.snap(), "a refused request wrote something")
		})
	}
}

// hostileReply is one NATS API request whose reply subject lies outside
// its caller's inbox: the gateway must neither admit nor answer it.
type hostileReply struct {
	name   string
	token  string // Sluice-Token header; "" = none
	reply  string // "" = a plain publish, no reply subject
	tenant string // Sluice-Tenant header (open mode); "" = none
}

// TestHostileNATSReplySubjects sends, on both NATS API subjects, requests
// of tenant acme (or of nobody) whose reply subject is an internal
// subject, another tenant's or a service's inbox or otherwise not the
// caller's inbox, and checks that nothing is published there, nothing is
// admitted and each is counted.
func TestHostileNATSReplySubjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := func(name, token, reply string) hostileReply {
		return hostileReply{name: name, token: token, reply: reply}
	}
	rows := []hostileReply{
		tok("internal requeue subject", tokenA, contracts.SubjectRequeue),
		tok("internal due subject", tokenA, contracts.SubjectDue),
		tok("internal result subject", tokenA, contracts.ResultSubject("w1")),
		tok("a worker's offer subject", tokenA, contracts.WorkerOfferSubject("w-1")),
		tok("the JetStream API", tokenA, "$JS.API.STREAM.PURGE."+contracts.StreamName),
		tok("another tenant's event subject", tokenA, contracts.EventSubject(tenantB, "j1")),
		tok("a service's inbox", tokenA, contracts.ServiceInboxPrefix(bus.InternalUser, "n1")+".r1"),
		tok("the default inbox in token mode", tokenA, contracts.DefaultInboxPrefix+".r1"),
		tok("the own prefix alone", tokenA, contracts.TenantInboxPrefix(tenantA)),
		tok("no reply subject", tokenA, ""),
		tok("no token, internal subject", "", contracts.SubjectRequeue),
		tok("wrong token, internal subject", "tok-acme-0123456788", contracts.SubjectRequeue),
		tok("wrong token, a service's inbox", "tok-acme-0123456788", contracts.ServiceInboxPrefix(bus.InternalUser, "n1")+".r2"),
	}
	requireRepliesRefused(t, b, map[string]string{contracts.HeaderToken: tokenA}, rows)
}

// TestNATSTokenOfAnotherTenantIsUnknown: over NATS, a valid token of
// another tenant than the caller's (its reply subject in the caller's
// inbox) gets the very answer an unknown token or no token gets: the same
// subject, body and headers, and nothing admitted. (Before, it got
// silence where an unknown token got a 401: a token oracle.)
func TestNATSTokenOfAnotherTenantIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bodies := map[string]string{
		contracts.SubjectSubmit:      `{"kind":"x"}`,
		contracts.SubjectSubmitBatch: `{"jobs":[{"kind":"x"}]}`,
	}
	// ask sends a request with token from a client whose inbox is
	// inbox's, and returns the answer (nil after a second of silence).
	ask := func(subject, token, inbox string) *nats.Msg {
		reply := inbox + "." + nats.NewInbox()[len(nats.InboxPrefix):]
		sub, err := b.nc.SubscribeSync(reply)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		m := &nats.Msg{Subject: subject, Reply: reply, Data: []byte(bodies[subject]), Header: nats.Header{}}
		if token != "" {
			m.Header.Set(contracts.HeaderToken, token)
		}
		require.NoError(t, b.nc.PublishMsg(m))
		got, err := sub.NextMsg(time.Second)
		if err != nil {
			return nil
		}
		require.Equal(t, reply, got.Subject)
		return got
	}
	before := b.snap()
	for _, subject := range []string{contracts.SubjectSubmit, contracts.SubjectSubmitBatch} {
		// acmex: a tenant whose name starts with another's.
		for _, inbox := range []string{contracts.TenantInboxPrefix(tenantA), contracts.TenantInboxPrefix(tenantB), contracts.TenantInboxPrefix(tenantA) + "x"} {
			unknown := ask(subject, "tok-not-a-token-000", inbox)
			require.NotNil(t, unknown, "%s: an unknown token is answered", subject)
			require.Contains(t, string(unknown.Data), `"status":401`)
			for _, token := range []string{"", tokenA, tokenB} {
				if inbox == contracts.TenantInboxPrefix(tenantA) && token == tokenA ||
					inbox == contracts.TenantInboxPrefix(tenantB) && token == tokenB {
					continue // the caller's own token
				}
				got := ask(subject, token, inbox)
				require.NotNil(t, got, "%s: token %q from %s got no answer", subject, token, inbox)
				require.Equal(t, string(unknown.Data), string(got.Data), "%s: token %q from %s", subject, token, inbox)
				require.Equal(t, unknown.Header, got.Header, "%s: token %q from %s", subject, token, inbox)
			}
		}
	}
	require.Equal(t, before, b.snap(), "a refused request admitted something")
}

// TestHostileNATSReplySubjectsOpenMode: without tokens, a request naming
// tenant acme is answered in acme's inbox or the default one, nowhere else.
func TestHostileNATSReplySubjectsOpenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, openMode())
	rows := []hostileReply{
		{name: "internal requeue subject", tenant: tenantA, reply: contracts.SubjectRequeue},
		{name: "the JetStream API", tenant: tenantA, reply: "$JS.API.STREAM.PURGE." + contracts.StreamName},
		{name: "another tenant's inbox", tenant: tenantA, reply: contracts.TenantInboxPrefix(tenantB) + ".r1"},
		{name: "a service's inbox", tenant: tenantA, reply: contracts.ServiceInboxPrefix(bus.InternalUser, "n1") + ".r1"},
		{name: "no tenant, internal subject", reply: contracts.SubjectRequeue},
		{name: "no tenant, another tenant's inbox", reply: contracts.TenantInboxPrefix(tenantB) + ".r2"},
		{name: "malformed tenant, internal subject", tenant: "a b", reply: contracts.SubjectRequeue},
		{name: "no reply subject", tenant: tenantA},
	}
	requireRepliesRefused(t, b, map[string]string{contracts.HeaderTenant: tenantA}, rows)
}

// requireRepliesRefused sends every row on both NATS API subjects and
// checks that nothing was published at its reply subject, nothing
// admitted and every row counted. sync are the headers of a valid caller,
// whose answered request marks that the row before it was handled.
func requireRepliesRefused(t *testing.T, b *bundle, sync map[string]string, rows []hostileReply) {
	t.Helper()
	bodies := map[string]string{
		contracts.SubjectSubmit:      `{"kind":"x"}`,
		contracts.SubjectSubmitBatch: `{"jobs":[{"kind":"x"},{"kind":"y"}]}`,
	}
	ctx := t.Context()
	streamMsgs := func() uint64 {
		info, err := b.stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	before, msgsBefore := b.snap(), streamMsgs()
	for _, subject := range []string{contracts.SubjectSubmit, contracts.SubjectSubmitBatch} {
		for _, row := range rows {
			var seen *nats.Subscription
			if row.reply != "" {
				var err error
				seen, err = b.nc.SubscribeSync(row.reply)
				require.NoError(t, err)
			}
			m := &nats.Msg{Subject: subject, Reply: row.reply, Data: []byte(bodies[subject]), Header: nats.Header{}}
			if row.token != "" {
				m.Header.Set(contracts.HeaderToken, row.token)
			}
			if row.tenant != "" {
				m.Header.Set(contracts.HeaderTenant, row.tenant)
			}
			require.NoError(t, b.nc.PublishMsg(m))
			// The endpoint handles its requests in order: once a later
			// one is answered, the hostile one has been handled, and
			// anything it published is queued on this connection.
			answer := b.natsRequest(subject, sync, `{"kind":`)
			require.Contains(t, string(answer.Data), `"status":400`)
			if seen != nil {
				n, _, err := seen.Pending()
				require.NoError(t, err)
				require.Zero(t, n, "%s %s: the gateway published at %q", subject, row.name, row.reply)
				require.NoError(t, seen.Unsubscribe())
			}
		}
		require.Equal(t, float64(len(rows)), repliesRefused(t, b.gws[0].reg, subject), subject)
	}
	require.Equal(t, before, b.snap(), "a refused request admitted something")
	require.Equal(t, msgsBefore, streamMsgs(), "a refused request wrote into the job stream")
}

// repliesRefused reads sluice_gateway_nats_replies_refused_total{subject}.
func repliesRefused(t *testing.T, reg *prometheus.Registry, subject string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "sluice_gateway_nats_replies_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subject" && l.GetValue() == subject {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no sluice_gateway_nats_replies_refused_total{subject=%q}", subject)
	return 0
}
