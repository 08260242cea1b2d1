package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// dupBodies are submit bodies that name a key twice, each with the error
// message the gateway must answer (400 invalid_json) on every transport.
var dupBodies = []struct{ body, msg string }{
	{`{"kind":"exec","payload":{"argv":["true"],"argv":["rm","-rf","/"]}}`, "payload.argv: duplicate key"},
	{`{"kind":"exec","payload":{"argv":["true"],"ARGV":["false"]}}`, "payload.ARGV: duplicate key (the same field as argv)"},
	{`{"kind":"sleep","kind":"exec","payload":{"argv":["true"]}}`, "kind: duplicate key"},
	{`{"kind":"x","items":[{"a":1},{"b":{"c":1,"c":2}}]}`, "items[1].b.c: duplicate key"},
	{`{"kind":"x","inputs":[{"name":"a","uri":"https://h/a","uri":"https://h/b","sha256":"pin"}]}`, "inputs[0].uri: duplicate key"},
	{`{"kind":"x","resources":{"memory":"1MiB","memory":"1GiB"}}`, "resources.memory: duplicate key"},
	{`{"kind":"x","resources":{"memory":"1MiB","Memory":"1GiB"}}`, "resources.Memory: duplicate key (the same field as memory)"},
}

// TestDuplicateKeysOnEveryTransport: a body that names a key twice in any
// object is a 400 naming the key over HTTP and NATS, as a submit and as
// a job of a batch, and nothing is written. (Before, the 202 echoed both
// argv values while the store and the worker took the last.)
func TestDuplicateKeysOnEveryTransport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tokA := map[string]string{contracts.HeaderToken: tokenA}
	before := b.snap()
	for _, tc := range dupBodies {
		e := b.submit(tokenA, tc.body).requireError(t, http.StatusBadRequest, contracts.CodeInvalidJSON)
		require.Equal(t, tc.msg, e.Message, tc.body)

		batch := `{"jobs":[{"kind":"x","payload":{"ok":1}},` + tc.body + `]}`
		res := b.do(req{method: http.MethodPost, path: "/v1/jobs/batch", token: tokenA, body: batch})
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var br contracts.BatchReply
		require.NoError(t, json.Unmarshal(res.body, &br))
		require.Len(t, br.Results, 2)
		require.Equal(t, http.StatusAccepted, br.Results[0].Status, string(res.body))
		b.finish(br.Results[0].Job.ID)
		require.Equal(t, http.StatusBadRequest, br.Results[1].Status, string(res.body))
		require.Equal(t, "jobs[1]: "+tc.msg, br.Results[1].Error.Message)

		nr := b.natsSubmit(tokA, tc.body)
		require.Equal(t, http.StatusBadRequest, nr.Status, tc.body)
		require.Equal(t, contracts.CodeInvalidJSON, nr.Error.Code)
		require.Equal(t, tc.msg, nr.Error.Message)

		msg := b.natsRequest(contracts.SubjectSubmitBatch, tokA, `{"jobs":[`+tc.body+`]}`)
		require.NoError(t, json.Unmarshal(msg.Data, &br), string(msg.Data))
		require.Len(t, br.Results, 1, string(msg.Data))
		require.Equal(t, http.StatusBadRequest, br.Results[0].Status)
		require.Equal(t, "jobs[0]: "+tc.msg, br.Results[0].Error.Message)
	}

	// A duplicate in the batch itself refuses the batch.
	const twice = `{"jobs":[{"kind":"x"}],"jobs":[{"kind":"y"}]}`
	e := b.do(req{method: http.MethodPost, path: "/v1/jobs/batch", token: tokenA, body: twice}).
		requireError(t, http.StatusBadRequest, contracts.CodeInvalidJSON)
	require.Equal(t, "jobs: duplicate key", e.Message)
	msg := b.natsRequest(contracts.SubjectSubmitBatch, tokA, twice)
	var refused contracts.SubmitReply
	require.NoError(t, json.Unmarshal(msg.Data, &refused), string(msg.Data))
	require.Equal(t, http.StatusBadRequest, refused.Status)
	require.Equal(t, "jobs: duplicate key", refused.Error.Message)

	// Only the well-formed first jobs of the batches were written.
	after := b.snap()
	require.Len(t, after.jobs, len(before.jobs)+len(dupBodies))
	for _, j := range after.jobs {
		require.JSONEq(t, `{"ok":1}`, string(j.Payload))
	}
}
