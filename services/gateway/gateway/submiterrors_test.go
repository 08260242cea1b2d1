package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// refusal is one request the gateway must refuse, with the status, code
// and message it must answer.
type refusal struct {
	body   string
	status int
	code   string
	msg    string
}

// submitRefusals are bodies refused the same way over every transport: a
// decode error names the JSON field and types, a payload of a built-in
// kind its run would refuse is a 422 naming the field.
var submitRefusals = []refusal{
	{`{"kind":"a","priority":"9"}`, http.StatusBadRequest, contracts.CodeInvalidJSON, "priority: expected an integer, got a string"},
	{`{"kind":"a","inputs":[{"name":"x","zz":1}]}`, http.StatusBadRequest, contracts.CodeInvalidJSON, "inputs[0].zz: unknown field"},
	{`{"kind":"sleep","payload":{"ms":-1}}`, http.StatusUnprocessableEntity, contracts.CodeValidation, "payload.ms: must be between 0 and 86400000, got -1"},
	{`{"kind":"exec","payload":{"timeout":"5s"}}`, http.StatusUnprocessableEntity, contracts.CodeValidation, `payload.argv: is required: the program and its arguments, ["program", …]`},
	{`{"kind":"exec","payload":{"argv":[1]}}`, http.StatusUnprocessableEntity, contracts.CodeValidation, "payload.argv[0]: expected a string, got a number"},
}

// TestSubmitErrorsSpeakAPI: single submits over HTTP and NATS, and the
// jobs of a batch over both (their messages naming the element), are
// refused with messages in API terms, and write nothing; a good job in
// the same batch is admitted, and a custom kind's payload is its own.
func TestSubmitErrorsSpeakAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 0))
	tokA := map[string]string{contracts.HeaderToken: tokenA}
	before := b.snap()
	for _, r := range submitRefusals {
		e := b.submit(tokenA, r.body).requireError(t, r.status, r.code)
		require.Equal(t, r.msg, e.Message, "HTTP %s", r.body)

		got := b.natsSubmit(tokA, r.body)
		require.Equal(t, r.status, got.Status, "NATS %s", r.body)
		require.Equal(t, r.code, got.Error.Code, "NATS %s", r.body)
		require.Equal(t, r.msg, got.Error.Message, "NATS %s", r.body)
	}
	require.Equal(t, before, b.snap(), "refused submits wrote nothing")

	jobs := []string{`{"kind":"sleep","payload":{"ms":5}}`}
	for _, r := range submitRefusals {
		jobs = append(jobs, r.body)
	}
	jobs = append(jobs, `{"kind":"resize","payload":{"ms":-1,"argv":"any"}}`)
	body := batchJSON(jobs...)
	var overNATS contracts.BatchReply
	data := b.natsRequest(contracts.SubjectSubmitBatch, tokA, body).Data
	require.NoError(t, json.Unmarshal(data, &overNATS), string(data))
	for name, res := range map[string][]contracts.SubmitReply{"HTTP": b.batch(tokenA, body).results(t), "NATS": overNATS.Results} {
		require.Len(t, res, len(jobs), name)
		require.Equal(t, http.StatusAccepted, res[0].Status, name)
		require.Equal(t, http.StatusAccepted, res[len(res)-1].Status, "%s: a custom kind's payload is not checked", name)
		for i, r := range submitRefusals {
			got := res[i+1]
			require.Equal(t, r.status, got.Status, "%s jobs[%d]", name, i+1)
			require.Equal(t, r.code, got.Error.Code, "%s jobs[%d]", name, i+1)
			require.Equal(t, "jobs["+strconv.Itoa(i+1)+"]: "+r.msg, got.Error.Message, name)
		}
	}
	require.Equal(t, before.counts.Active()+4, b.snap().counts.Active(), "only the good jobs were admitted")
}
