package gateway_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

func kinds(k ...string) option { return func(c *gateway.Config) { c.Kinds = k } }

// TestSluiceKindsRefusesOtherKinds checks SLUICE_GATEWAY_KINDS: an unknown kind is
// refused with 422 over HTTP and NATS and writes nothing; a listed kind is
// admitted; an empty list admits any kind.
func TestSluiceKindsRefusesOtherKinds(t *testing.T) {
	t.Parallel()
	b := setup(t, kinds("resize", "sleep"))
	before := b.snap()
	r := b.submit(tokenA, `{"kind":"resise"}`)
	r.requireError(t, http.StatusUnprocessableEntity, contracts.CodeUnknownKind)
	require.Contains(t, string(r.body), `is not run here; the kinds are resize, sleep`)
	reply := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, `{"kind":"resise"}`)
	require.Equal(t, http.StatusUnprocessableEntity, reply.Status)
	require.Equal(t, contracts.CodeUnknownKind, reply.Error.Code)
	require.Equal(t, before, b.snap())

	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"resize"}`).status)

	open := setup(t)
	require.Equal(t, http.StatusAccepted, open.submit(tokenA, `{"kind":"anything"}`).status)
}

func TestSluiceKindsIsValidated(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.LoadConfig(map[string]string{"SLUICE_GATEWAY_KINDS": "resize, sleep"})
	require.NoError(t, err)
	require.Equal(t, []string{"resize", " sleep"}, cfg.Kinds)
	_, err = gateway.LoadConfig(map[string]string{"SLUICE_GATEWAY_KINDS": "resize,Bad Kind"})
	require.ErrorContains(t, err, "SLUICE_GATEWAY_KINDS")
}
