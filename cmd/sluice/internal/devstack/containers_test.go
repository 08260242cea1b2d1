//go:build containers

package devstack

// The whole pipeline against real servers in containers — mongo:7 as a
// replica set and nats:2.12 with JetStream — when Docker is available:
//
//	make test-containers
//
// Without Docker the test skips with the reason. The "containers" build tag
// keeps it out of `make test`.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcmongo "github.com/testcontainers/testcontainers-go/modules/mongodb"
	tcnats "github.com/testcontainers/testcontainers-go/modules/nats"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func requireDocker(t *testing.T) {
	t.Helper()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		t.Skipf("docker not available: %v", err)
	}
	defer p.Close()
	if err := p.Health(context.Background()); err != nil {
		t.Skipf("docker not available: %v", err)
	}
}

func TestEndToEndOnRealServers(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	mc, err := tcmongo.Run(ctx, "mongo:7", tcmongo.WithReplicaSet("rs0"))
	testcontainers.CleanupContainer(t, mc)
	require.NoError(t, err)
	mongoURI, err := mc.ConnectionString(ctx)
	require.NoError(t, err)

	nc, err := tcnats.Run(ctx, "nats:2.12", testcontainers.WithCmdArgs("-js"))
	testcontainers.CleanupContainer(t, nc)
	require.NoError(t, err)
	natsURL, err := nc.ConnectionString(ctx)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	env := testEnv(t.TempDir(), map[string]string{
		"SLUICE_STORE":                       mongoURI,
		"SLUICE_NATS_URL":                    natsURL,
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "2",
	})
	s, err := Start(ctx, Options{Environ: env, Workers: 3, Schedulers: 2, HTTPListener: ln, Log: zerolog.Nop()})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	b := &bundle{t: t, stack: s, base: "http://" + s.HTTPAddr, cancel: stop, done: done}
	t.Cleanup(b.stop)
	b.waitReady()

	var ids []string
	for i := range 50 {
		ids = append(ids, b.mustSubmit("sleep", map[string]int{"ms": i % 5}).ID)
	}
	for _, id := range ids {
		j := b.waitFinal(id, time.Minute)
		require.Equal(t, contracts.StateSucceeded, j.State, j.Error)
	}
}
