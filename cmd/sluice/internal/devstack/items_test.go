package devstack

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestBatchesAgreeAcrossTransports: the dev stack's NATS server carries
// the largest batch SLUICE_GATEWAY_MAX_BATCH_BYTES lets through HTTP, so a batch
// of 1.4 MiB (over the NATS default max_payload) is admitted over NATS as
// over HTTP; and one with more items than SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST is
// refused on both, naming the limit, with nothing admitted.
func TestBatchesAgreeAcrossTransports(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, map[string]string{
		"SLUICE_GATEWAY_MAX_BODY_BYTES":        "65536",
		"SLUICE_GATEWAY_MAX_BATCH_BYTES":       "2097152",
		"SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST": "500",
	})
	jobs := make([]string, 300)
	for i := range jobs {
		jobs[i] = `{"kind":"pad","payload":"` + strings.Repeat("x", 5000) + `"}`
	}
	body := []byte(`{"jobs":[` + strings.Join(jobs, ",") + `]}`)
	require.Greater(t, len(body), 1<<20+1<<18, "over the NATS default max_payload")

	resp, err := http.Post(b.base+"/v1/jobs/batch", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var br contracts.BatchReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&br))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, br.Results, 300)

	nc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	msg, err := nc.Request(contracts.SubjectSubmitBatch, body, 20*time.Second)
	require.NoError(t, err, "the NATS server carries what HTTP accepts")
	br = contracts.BatchReply{}
	require.NoError(t, json.Unmarshal(msg.Data, &br), string(msg.Data[:min(len(msg.Data), 300)]))
	require.Len(t, br.Results, 300)
	require.Equal(t, http.StatusAccepted, br.Results[299].Status)

	var before contracts.Stats
	require.Equal(t, http.StatusOK, b.getJSON("/v1/stats", &before))
	items := make([]string, 500)
	for i := range items {
		items[i] = "1"
	}
	over := []byte(`{"jobs":[{"kind":"pad","items":[` + strings.Join(items, ",") + `]}]}`) // 501 items
	resp, err = http.Post(b.base+"/v1/jobs/batch", "application/json", bytes.NewReader(over))
	require.NoError(t, err)
	var eb contracts.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, contracts.LimitRequestItems, eb.Error.Limit)
	msg, err = nc.Request(contracts.SubjectSubmitBatch, over, 20*time.Second)
	require.NoError(t, err)
	var refused contracts.SubmitReply
	require.NoError(t, json.Unmarshal(msg.Data, &refused))
	require.Equal(t, http.StatusRequestEntityTooLarge, refused.Status)
	require.Equal(t, contracts.LimitRequestItems, refused.Error.Limit)
	var after contracts.Stats
	require.Equal(t, http.StatusOK, b.getJSON("/v1/stats", &after))
	require.Equal(t, before.Counts, after.Counts, "nothing admitted")
}
