package worker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestResultsWaitingGoTogether checks the result senders: the results
// waiting when a sender is free go in one ResultBatch message, a result
// that would make the message too large waits for the next one, and a lone
// result goes as a plain Result.
func TestResultsWaitingGoTogether(t *testing.T) {
	t.Parallel()
	nc, js := bustest.Start(t).Connect("worker")
	_, err := bus.EnsureStream(t.Context(), js)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.WorkerID = "w1"
	cfg.Kinds = nil
	w, err := New(cfg, Deps{NC: nc, JS: js, Log: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)

	const n = 12
	big := strings.Repeat("x", int(nc.MaxPayload())/3)
	w.results = make(chan resultReq, n+4) // queued before the sender looks
	var reqs []resultReq
	queue := func(id, result string) {
		res := contracts.Result{JobID: id, Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}
		if result != "" {
			res.Result = json.RawMessage(`"` + result + `"`)
		}
		data, err := json.Marshal(res)
		require.NoError(t, err)
		r := resultReq{res: res, data: data, done: make(chan bool, 1)}
		reqs = append(reqs, r)
		w.results <- r
	}
	for i := range n {
		queue("j"+string(rune('a'+i)), "")
	}
	queue("big1", big)
	queue("big2", big)
	queue("big3", big)

	ctx, cancel := context.WithCancel(t.Context())
	deliverCtx, stop := context.WithTimeout(t.Context(), 20*time.Second)
	defer stop()
	done := make(chan struct{})
	go func() { defer close(done); w.resultLoop(ctx, deliverCtx) }()
	for _, r := range reqs {
		select {
		case ok := <-r.done:
			require.True(t, ok, r.res.JobID)
		case <-time.After(10 * time.Second):
			t.Fatalf("result %s not delivered", r.res.JobID)
		}
	}
	queue("lone", "")
	require.True(t, <-reqs[len(reqs)-1].done)
	cancel()
	<-done

	cons, err := js.CreateConsumer(t.Context(), contracts.StreamName, jetstream.ConsumerConfig{FilterSubject: contracts.ResultSubject("w1")})
	require.NoError(t, err)
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	var sizes []int
	var plain []bool
	for m := range batch.Messages() {
		rs, err := contracts.DecodeResults(m.Data())
		require.NoError(t, err)
		sizes = append(sizes, len(rs))
		_, err = contracts.DecodeResult(m.Data())
		plain = append(plain, err == nil)
	}
	require.Equal(t, []int{n + 2, 1, 1}, sizes, "what fits in one message goes together, in order")
	require.Equal(t, []bool{false, true, true}, plain)
}
