package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestSubmitResources: a job's resource request is accepted on POST
// /v1/jobs, in batches and on fan-outs, stored and shown by GET (children
// inherit it); while no worker of its kind is known a request of any size
// is admitted (it fails capacity: at its dispatch deadline if none ever
// takes it); once one is, a request larger than every such worker has is
// refused with 422, a batch's job alone.
func TestSubmitResources(t *testing.T) {
	t.Parallel()
	b := setup(t)
	get := func(id string) contracts.Job {
		r := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + id, token: tokenA})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		return r.job(t)
	}
	one := b.submit(tokenA, `{"kind":"enc","resources":{"cpu":0.5,"memory":"512MiB"}}`)
	require.Equal(t, http.StatusAccepted, one.status, string(one.body))
	want := &contracts.Resources{CPU: 0.5, Memory: 512 << 20}
	require.Equal(t, want, one.job(t).Resources)
	require.Equal(t, want, get(one.job(t).ID).Resources)
	require.Contains(t, string(one.body), `"resources":{"cpu":0.5,"memory":"512MiB"}`, "snake_case, IEC memory")

	huge := b.submit(tokenA, `{"kind":"enc","resources":{"cpu":64,"memory":"1TiB"}}`)
	require.Equal(t, http.StatusAccepted, huge.status, "no worker known: admitted")

	fan := b.submit(tokenA, `{"kind":"enc","items":[1,2],"resources":{"cpu":1}}`)
	require.Equal(t, http.StatusAccepted, fan.status, string(fan.body))
	child := get(contracts.ChildID(fan.job(t).ID, 1))
	require.Equal(t, &contracts.Resources{CPU: 1}, child.Resources, "children inherit the request")

	ann, err := json.Marshal(contracts.Announce{WorkerID: "w-1", Kinds: []string{"enc"}, Capacity: 2, IntervalMS: 60000,
		Resources: &contracts.Resources{CPU: 2, Memory: 2 << 30}, FreeResources: &contracts.Resources{CPU: 2, Memory: 2 << 30}})
	require.NoError(t, err)
	waitUntil(t, func() bool {
		require.NoError(t, b.nc.Publish(contracts.AnnounceSubject("w-1"), ann))
		return b.submit(tokenA, `{"kind":"enc","resources":{"cpu":64}}`).status == http.StatusUnprocessableEntity
	})
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"enc","resources":{"cpu":2,"memory":"2GiB"}}`).status,
		"exactly the capacity fits")
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"other","resources":{"cpu":64}}`).status,
		"no worker of that kind known: admitted")

	res := b.batch(tokenA, `{"jobs":[
		{"kind":"enc","resources":{"cpu":1}},
		{"kind":"enc","resources":{"cpu":3}},
		{"kind":"enc","resources":{"memory":"1XB"}}
	]}`).results(t)
	require.Len(t, res, 3)
	require.Equal(t, http.StatusAccepted, res[0].Status)
	require.Equal(t, &contracts.Resources{CPU: 1}, res[0].Job.Resources)
	require.Equal(t, http.StatusUnprocessableEntity, res[1].Status)
	require.Contains(t, res[1].Error.Message, "more than any live worker")
	require.Equal(t, http.StatusUnprocessableEntity, res[2].Status)
	require.Contains(t, res[2].Error.Message, "jobs[2]: resources.memory")
}
