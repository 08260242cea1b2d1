package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// batch posts body to /v1/jobs/batch with token.
func (b *bundle) batch(token, body string) response {
	b.tb.Helper()
	return b.do(req{method: http.MethodPost, path: "/v1/jobs/batch", token: token, body: body})
}

// results decodes a 200 batch answer strictly.
func (r response) results(tb testing.TB) []contracts.SubmitReply {
	tb.Helper()
	require.Equal(tb, http.StatusOK, r.status, string(r.body))
	var br contracts.BatchReply
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	require.NoError(tb, dec.Decode(&br), string(r.body))
	return br.Results
}

func TestBatchSubmitAdmitsEachJobOnItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 3))
	body := `{"jobs":[
		{"kind":"sleep","key":"k1","payload":{"ms":1}},
		{"kind":"sleep","key":"k1"},
		{"kind":"sleep","priority":12},
		{"kind":"sleep","payload":{"ms":2}},
		"not an object",
		{"kind":"sleep","run_at":"1m","concurrency_key":"db","concurrency_limit":1},
		{"kind":"sleep"}
	]}`
	res := b.batch(tokenA, body).results(t)
	require.Len(t, res, 7)
	want := []int{http.StatusAccepted, http.StatusOK, http.StatusUnprocessableEntity, http.StatusAccepted,
		http.StatusBadRequest, http.StatusAccepted, http.StatusTooManyRequests}
	for i, r := range res {
		require.Equal(t, want[i], r.Status, "jobs[%d]: %+v", i, r.Error)
	}
	require.Equal(t, res[0].Job.ID, res[1].Job.ID, "the second job joined the first (same key)")
	require.Empty(t, res[0].Job.Payload, "results carry no payloads")
	require.Equal(t, contracts.CodeValidation, res[2].Error.Code)
	require.Contains(t, res[2].Error.Message, "jobs[2]: priority")
	require.Contains(t, res[4].Error.Message, "jobs[4]")
	require.Equal(t, contracts.CodeTenantCap, res[6].Error.Code)
	require.Equal(t, contracts.LimitTenant, res[6].Error.Limit)
	require.Positive(t, res[6].RetryAfterMS)
	require.NotNil(t, res[5].Job.RunAt)
	require.Equal(t, "db", res[5].Job.ConcurrencyKey)

	// What was admitted is in the store with its payload, the delayed
	// job's due message out.
	stored := b.submit(tokenA, `{"kind":"sleep"}`) // the tenant is at its cap
	require.Equal(t, http.StatusTooManyRequests, stored.status)
	got := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + res[3].Job.ID, token: tokenA}).job(t)
	require.JSONEq(t, `{"ms":2}`, string(got.Payload))
	// The batch answers once JetStream has stored the due messages.
	require.Equal(t, []string{res[5].Job.ID}, b.dueIDs(context.Background()))
}

func TestBatchSubmitRefusesBadBatchesWholly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.snap()
	many := `{"jobs":[` + strings.Repeat(`{"kind":"sleep"},`, contracts.MaxBatchJobs) + `{"kind":"sleep"}]}`
	for name, tc := range map[string]struct {
		body   string
		status int
		code   string
	}{
		"not json":      {`{"jobs":[`, http.StatusBadRequest, contracts.CodeInvalidJSON},
		"not an object": {`[{"kind":"sleep"}]`, http.StatusBadRequest, contracts.CodeInvalidJSON},
		"unknown field": {`{"jobs":[{"kind":"sleep"}],"x":1}`, http.StatusBadRequest, contracts.CodeInvalidJSON},
		"no jobs field": {`{}`, http.StatusUnprocessableEntity, contracts.CodeValidation},
		"empty":         {`{"jobs":[]}`, http.StatusUnprocessableEntity, contracts.CodeValidation},
		"too many":      {many, http.StatusUnprocessableEntity, contracts.CodeValidation},
	} {
		b.batch(tokenA, tc.body).requireError(t, tc.status, tc.code)
		_ = name
	}
	b.do(req{method: http.MethodPost, path: "/v1/jobs/batch", token: tokenA, body: `{"jobs":[]}`, contentType: "text/plain"}).
		requireError(t, http.StatusUnsupportedMediaType, contracts.CodeUnsupportedMedia)
	b.batch("", `{"jobs":[{"kind":"sleep"}]}`).requireError(t, http.StatusUnauthorized, contracts.CodeUnauthorized)
	require.Equal(t, before, b.snap(), "a refused batch writes nothing")
}

func TestBatchSubmitOverNATS(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 2))
	ask := func(header map[string]string, body string) []byte {
		return b.natsRequest(contracts.SubjectSubmitBatch, header, body).Data
	}
	tokA := map[string]string{contracts.HeaderToken: tokenA}
	var br contracts.BatchReply
	data := ask(tokA, `{"jobs":[{"kind":"sleep"},{"kind":"sleep"},{"kind":"sleep"}]}`)
	require.NoError(t, json.Unmarshal(data, &br), string(data))
	require.Len(t, br.Results, 3)
	require.Equal(t, []int{202, 202, 429}, []int{br.Results[0].Status, br.Results[1].Status, br.Results[2].Status})
	require.Equal(t, "acme", br.Results[0].Job.Tenant)

	var refused contracts.SubmitReply
	require.NoError(t, json.Unmarshal(ask(nil, `{"jobs":[{"kind":"sleep"}]}`), &refused))
	require.Equal(t, http.StatusUnauthorized, refused.Status)
	require.NoError(t, json.Unmarshal(ask(tokA, `{"jobs":[]}`), &refused))
	require.Equal(t, http.StatusUnprocessableEntity, refused.Status)
}

func TestBatchSubmitOfManyJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 0))
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for i := range contracts.MaxBatchJobs {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"kind":"sleep","payload":{"ms":%d}}`, i)
	}
	sb.WriteString(`]}`)
	res := b.batch(tokenA, sb.String()).results(t)
	require.Len(t, res, contracts.MaxBatchJobs)
	for i, r := range res {
		require.Equal(t, http.StatusAccepted, r.Status, "jobs[%d]", i)
	}
	require.Equal(t, contracts.MaxBatchJobs, b.snap().counts.Active())
}
