package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestConnectGivesEachConnectionItsOwnInbox: every service connection
// takes an inbox prefix of its own under the services' root, named by its
// user (or its name without one), never the shared default; a given
// prefix is kept.
func TestConnectGivesEachConnectionItsOwnInbox(t *testing.T) {
	t.Parallel()
	srv := bustest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	inbox := func(o bus.ConnectOptions) string {
		o.InProcess = srv.NS
		nc, err := bus.Connect(ctx, o)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc.NewInbox()
	}
	a, b := inbox(bus.ConnectOptions{Name: "sluice-worker"}), inbox(bus.ConnectOptions{Name: "sluice-worker"})
	for _, in := range []string{a, b} {
		require.True(t, contracts.InInbox(contracts.ServiceInboxRoot+".sluice-worker", in), in)
		require.False(t, contracts.InSomeTenantInbox(in), in)
		require.False(t, strings.HasPrefix(in, contracts.DefaultInboxPrefix+"."), in)
	}
	require.NotEqual(t, a[:strings.LastIndexByte(a, '.')], b[:strings.LastIndexByte(b, '.')],
		"two connections of one service have two prefixes")

	pw, err := bus.NewInternalPassword()
	require.NoError(t, err)
	closed := bustest.StartWith(t, bus.EmbeddedOptions{NoListen: true, Auth: &bus.EmbeddedAuth{InternalPassword: pw, Tenant: tokens}})
	nc, err := bus.Connect(ctx, bus.ConnectOptions{InProcess: closed.NS, Name: "sluice-gateway", User: bus.InternalUser, Password: pw})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.True(t, contracts.InInbox(contracts.ServiceInboxRoot+"."+bus.InternalUser, nc.NewInbox()), "named by its user")

	own := contracts.TenantInboxPrefix("acme")
	require.True(t, contracts.InInbox(own, inbox(bus.ConnectOptions{Name: "client", InboxPrefix: own})))
}
