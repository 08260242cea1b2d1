package bustest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartServesInProcessConnectionsWithJetStream(t *testing.T) {
	t.Parallel()
	srv := bustest.Start(t)
	_, js := srv.JobStream("publisher")
	require.NoError(t, bus.Publish(context.Background(), js, contracts.SubjectDue, contracts.Due{JobID: "j1"}, ""))
	st, err := js.Stream(context.Background(), contracts.StreamName)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs)
}

func TestStartWithListenAcceptsOutsideClients(t *testing.T) {
	t.Parallel()
	srv := bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0"})
	nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Flush())
}
