package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
)

// callerOf is the tenant whose client sends a request with these headers:
// the token's tenant, else the named tenant, else the default one; a
// request no tenant could send comes from a client of tenant "nobody".
func callerOf(header map[string]string) string {
	switch tok, ok := header[contracts.HeaderToken]; {
	case tok == tokenA:
		return tenantA
	case tok == tokenB:
		return tenantB
	case ok:
		return "nobody"
	}
	if t, ok := header[contracts.HeaderTenant]; ok {
		if !auth.ValidTenant(t) {
			return "nobody"
		}
		return t
	}
	return auth.DefaultTenant
}

// natsRequest sends a request to subject with the given headers as a
// tenant's client does, its reply subject in the inbox of the tenant the
// headers name (callerOf), and returns the answer.
func (b *bundle) natsRequest(subject string, header map[string]string, body string) *nats.Msg {
	b.tb.Helper()
	m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{},
		Reply: contracts.TenantInboxPrefix(callerOf(header)) + "." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)}
	for k, v := range header {
		m.Header.Set(k, v)
	}
	sub, err := b.nc.SubscribeSync(m.Reply)
	require.NoError(b.tb, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(b.tb, b.nc.PublishMsg(m))
	res, err := sub.NextMsg(10 * time.Second)
	require.NoError(b.tb, err, "no answer at %s", m.Reply)
	return res
}

// natsSubmit sends a submit request over NATS with the given headers.
func (b *bundle) natsSubmit(header map[string]string, body string) contracts.SubmitReply {
	b.tb.Helper()
	res := b.natsRequest(contracts.SubjectSubmit, header, body)
	var reply contracts.SubmitReply
	dec := json.NewDecoder(strings.NewReader(string(res.Data)))
	dec.DisallowUnknownFields()
	require.NoError(b.tb, dec.Decode(&reply), string(res.Data))
	// An error answer is also a micro error, with the status as its code;
	// the body is the same SubmitReply either way.
	if reply.Status >= http.StatusBadRequest {
		require.Equal(b.tb, strconv.Itoa(reply.Status), res.Header.Get(micro.ErrorCodeHeader), string(res.Data))
		require.NotEmpty(b.tb, res.Header.Get(micro.ErrorHeader))
	} else {
		require.Empty(b.tb, res.Header.Get(micro.ErrorCodeHeader), string(res.Data))
	}
	return reply
}

func TestNATSSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 2), maxBody(512))
	tokA := map[string]string{contracts.HeaderToken: tokenA}
	tokB := map[string]string{contracts.HeaderToken: tokenB}

	first := b.natsSubmit(tokA, `{"kind":"nats","key":"n-1"}`)
	require.Equal(t, http.StatusAccepted, first.Status)
	require.NotNil(t, first.Job)
	require.Nil(t, first.Error)
	require.Equal(t, tenantA, first.Job.Tenant)
	stored, err := b.st.Get(t.Context(), first.Job.ID)
	require.NoError(t, err)
	require.Equal(t, contracts.StatePending, stored.State)

	joined := b.natsSubmit(tokA, `{"kind":"nats","key":"n-1"}`)
	require.Equal(t, http.StatusOK, joined.Status)
	require.Equal(t, first.Job.ID, joined.Job.ID)

	require.Equal(t, http.StatusAccepted, b.natsSubmit(tokA, `{"kind":"nats"}`).Status)
	before := b.snap()
	full := b.natsSubmit(tokA, `{"kind":"nats"}`)
	require.Equal(t, http.StatusTooManyRequests, full.Status)
	require.Equal(t, contracts.CodeTenantCap, full.Error.Code)
	require.Equal(t, "tenant", full.Error.Limit)
	require.Equal(t, int64(1500), full.RetryAfterMS)
	require.Nil(t, full.Job)

	cases := []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{"bad json", tokB, `{"kind":`, http.StatusBadRequest, contracts.CodeInvalidJSON},
		{"unknown field", tokB, `{"kind":"a","x":1}`, http.StatusBadRequest, contracts.CodeInvalidJSON},
		{"invalid", tokB, `{"kind":"A B"}`, http.StatusUnprocessableEntity, contracts.CodeValidation},
		{"too large", tokB, `{"kind":"a","payload":"` + strings.Repeat("x", 600) + `"}`, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge},
		{"no token", nil, `{"kind":"a"}`, http.StatusUnauthorized, contracts.CodeUnauthorized},
		{"wrong token", map[string]string{contracts.HeaderToken: "nope"}, `{"kind":"a"}`, http.StatusUnauthorized, contracts.CodeUnauthorized},
		{"tenant header is no credential", map[string]string{contracts.HeaderTenant: tenantA}, `{"kind":"a"}`, http.StatusUnauthorized, contracts.CodeUnauthorized},
		{"bearer syntax is not a token", map[string]string{contracts.HeaderToken: "Bearer " + tokenA}, `{"kind":"a"}`, http.StatusUnauthorized, contracts.CodeUnauthorized},
	}
	for _, tc := range cases {
		got := b.natsSubmit(tc.header, tc.body)
		require.Equal(t, tc.status, got.Status, tc.name)
		require.NotNil(t, got.Error, tc.name)
		require.Equal(t, tc.code, got.Error.Code, tc.name)
		require.NotEmpty(t, got.Error.Message, tc.name)
		require.Nil(t, got.Job, tc.name)
	}
	require.Equal(t, before, b.snap(), "rejected NATS submits wrote nothing")

	// HTTP and NATS share the caps and the dedup.
	r := b.submit(tokenA, `{"kind":"nats","key":"n-1"}`)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, first.Job.ID, r.job(t).ID)
}

func TestNATSSubmitOpenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, openMode())
	got := b.natsSubmit(map[string]string{contracts.HeaderTenant: "team.blue-1"}, `{"kind":"x"}`)
	require.Equal(t, http.StatusAccepted, got.Status)
	require.Equal(t, "team.blue-1", got.Job.Tenant)

	got = b.natsSubmit(nil, `{"kind":"x"}`)
	require.Equal(t, http.StatusAccepted, got.Status)
	require.Equal(t, "default", got.Job.Tenant)

	// Open mode also answers at the default inbox prefix (a client that
	// sets none, e.g. `nats req`).
	res, err := b.nc.Request(contracts.SubjectSubmit, []byte(`{"kind":"x"}`), 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(res.Data), `"status":202`)

	before := b.snap()
	for _, bad := range []string{"a b", "../etc", strings.Repeat("t", 65), "x\x00y"} {
		got = b.natsSubmit(map[string]string{contracts.HeaderTenant: bad}, `{"kind":"x"}`)
		require.Equal(t, http.StatusBadRequest, got.Status, bad)
		require.Equal(t, contracts.CodeBadRequest, got.Error.Code)
	}
	require.Equal(t, before, b.snap())
}

// TestNATSReplyKeepsPayloadAsSent: the submit reply carries the job's
// payload as the HTTP API does, without HTML escapes in its strings.
func TestNATSReplyKeepsPayloadAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.natsRequest(contracts.SubjectSubmit, map[string]string{contracts.HeaderToken: tokenA},
		`{"kind":"a","payload":{"s":"<a & b>"}}`)
	require.Contains(t, string(res.Data), `{"s":"<a & b>"}`)
}

// serviceStats reads the submit service's $SRV.STATS: errors by endpoint
// name, and the version its INFO announces.
func (b *bundle) serviceStats() (errs map[string]int, version string) {
	b.tb.Helper()
	subj, err := micro.ControlSubject(micro.StatsVerb, contracts.SubmitServiceName, "")
	require.NoError(b.tb, err)
	msg, err := b.nc.Request(subj, nil, 10*time.Second)
	require.NoError(b.tb, err)
	var st micro.Stats
	require.NoError(b.tb, json.Unmarshal(msg.Data, &st), string(msg.Data))
	errs = map[string]int{}
	for _, e := range st.Endpoints {
		errs[e.Name] = e.NumErrors
	}
	return errs, st.Version
}

// TestNATSServiceReportsReleaseAndErrors: the submit service announces the
// release version, and the requests it answers with an error (400, 422,
// 401, a refused batch) count as errors in its stats, while admitted ones
// and a batch of refused jobs (answered 200) do not.
func TestNATSServiceReportsReleaseAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tokA := map[string]string{contracts.HeaderToken: tokenA}

	errs, version := b.serviceStats()
	require.Equal(t, contracts.Release, version)
	require.Zero(t, errs["submit"])
	require.Zero(t, errs["submit-batch"])

	require.Equal(t, http.StatusAccepted, b.natsSubmit(tokA, `{"kind":"a"}`).Status)
	require.Equal(t, http.StatusBadRequest, b.natsSubmit(tokA, `{"kind":`).Status)
	require.Equal(t, http.StatusUnprocessableEntity, b.natsSubmit(tokA, `{"kind":"A B"}`).Status)
	require.Equal(t, http.StatusUnauthorized, b.natsSubmit(map[string]string{contracts.HeaderToken: "nope"}, `{"kind":"a"}`).Status)

	// A batch refused as a whole is an error; one admitted with a refused
	// job is a 200.
	res := b.natsRequest(contracts.SubjectSubmitBatch, tokA, `{"jobs":[]}`)
	require.Equal(t, strconv.Itoa(http.StatusUnprocessableEntity), res.Header.Get(micro.ErrorCodeHeader))
	require.Equal(t, http.StatusUnprocessableEntity, natsRefusal(t, res.Data).Status)
	res = b.natsRequest(contracts.SubjectSubmitBatch, tokA, `{"jobs":[{"kind":"a"},{"kind":"A B"}]}`)
	require.Empty(t, res.Header.Get(micro.ErrorCodeHeader))

	errs, _ = b.serviceStats()
	require.Equal(t, 3, errs["submit"])
	require.Equal(t, 1, errs["submit-batch"])
}

// TestNATSErrorHeaderIsSafe: a message quoting the caller's input (an
// unknown field's name with a line break) still answers, with a header
// value free of control characters.
func TestNATSErrorHeaderIsSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.natsRequest(contracts.SubjectSubmit, map[string]string{contracts.HeaderToken: tokenA},
		`{"kind":"a","x\r\nNats-Evil: 1`+strings.Repeat("y", 400)+`":1}`)
	require.Equal(t, "400", res.Header.Get(micro.ErrorCodeHeader), string(res.Data))
	h := res.Header.Get(micro.ErrorHeader)
	require.NotContains(t, h, "\r")
	require.NotContains(t, h, "\n")
	require.LessOrEqual(t, len(h), 256)
	require.Empty(t, res.Header.Get("Nats-Evil"))
}
