package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// bodyWithPayload is a submit body whose payload is a JSON string of n bytes.
func bodyWithPayload(n int) string {
	return `{"kind":"big","payload":"` + strings.Repeat("a", n) + `"}`
}

// TestJobTooLargeForNATSIs413 checks that a job whose offer, reply or
// events the NATS connection could not carry is refused at admission over
// HTTP and NATS, and writes nothing, while one that fits is admitted.
func TestJobTooLargeForNATSIs413(t *testing.T) {
	t.Parallel()
	b := setup(t, maxBody(4<<20)) // the body limit is not what stops it
	maxPayload := int(b.nc.MaxPayload())
	tok := map[string]string{contracts.HeaderToken: tokenA}

	before := b.snap()
	r := b.submit(tokenA, bodyWithPayload(maxPayload))
	r.requireError(t, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge)
	require.Contains(t, string(r.body), "message bus")
	require.Equal(t, before, b.snap(), "a refused job writes nothing")

	// Over NATS the request itself must fit, so the reply is what would
	// not: a body just under the max payload.
	reply := b.natsSubmit(tok, bodyWithPayload(maxPayload-100))
	require.Equal(t, http.StatusRequestEntityTooLarge, reply.Status)
	require.NotNil(t, reply.Error)
	require.Equal(t, contracts.CodeTooLarge, reply.Error.Code)
	require.Nil(t, reply.Job)
	require.Equal(t, before, b.snap(), "no job stored, so a retry cannot duplicate it")

	fits := maxPayload - contracts.MessageEnvelope - 4096
	r = b.submit(tokenA, bodyWithPayload(fits))
	require.Equal(t, http.StatusAccepted, r.status, string(r.body[:min(len(r.body), 300)]))
	got := b.natsSubmit(tok, bodyWithPayload(fits))
	require.Equal(t, http.StatusAccepted, got.Status)
}
