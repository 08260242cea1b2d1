package service_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// config is a service configuration as the services have them.
type config struct {
	Bus   bus.Env
	Store dial.Env
	Log   observe.Env
	Fail  bool
}

func (c config) common(withStore bool) service.Common {
	cm := service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.Store.DataDir}
	if withStore {
		cm.OpenStore = func(ctx context.Context, retry func(error, time.Duration)) (store.Store, error) {
			return dial.OpenRetry(ctx, c.Store, retry)
		}
	}
	return cm
}

// probe is a service that records what it was given and runs until ctx ends.
type probe struct {
	deps service.Deps
	ran  chan struct{}
}

func (p *probe) Run(ctx context.Context) error {
	close(p.ran)
	if err := p.deps.NC.Publish("probe.hello", []byte("hi")); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func binary(t *testing.T, withStore bool, got chan<- *probe) service.Binary[config] {
	dir := t.TempDir()
	return service.Binary[config]{
		Name: "probe",
		Load: func(map[string]string) (config, error) {
			return config{Store: dial.Env{DataDir: dir}, Log: observe.Env{LogLevel: "info", LogFormat: "json"}}, nil
		},
		Common: func(c config) service.Common { return c.common(withStore) },
		Build: func(_ config, d service.Deps) (service.Runner, error) {
			p := &probe{deps: d, ran: make(chan struct{})}
			got <- p
			return p, nil
		},
	}
}

func TestRunOpensTheDependenciesAndStopsWithTheContext(t *testing.T) {
	t.Parallel()
	for _, withStore := range []bool{true, false} {
		built := make(chan *probe, 1)
		b := binary(t, withStore, built)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var logs bytes.Buffer
		go func() { done <- service.Run(ctx, b, map[string]string{}, &logs) }()
		p := <-built
		<-p.ran
		require.NotNil(t, p.deps.NC)
		require.NotNil(t, p.deps.JS)
		require.NotNil(t, p.deps.Registry)
		if withStore {
			require.NotNil(t, p.deps.Store)
			require.NoError(t, p.deps.Store.Ping(ctx))
		} else {
			require.Nil(t, p.deps.Store, "a service without OpenStore gets no store")
		}
		mfs, err := p.deps.Registry.Gather()
		require.NoError(t, err)
		require.NotEmpty(t, mfs, "the registry carries the Go and process collectors")
		cancel()
		require.NoError(t, <-done)
		require.Contains(t, logs.String(), `"service":"probe"`)
	}
}

func TestRunReportsConfigAndBuildErrors(t *testing.T) {
	t.Parallel()
	b := binary(t, true, make(chan *probe, 1))
	bad := b
	bad.Load = func(map[string]string) (config, error) { return config{}, errors.New("SLUICE_X: must be positive") }
	require.ErrorContains(t, service.Run(context.Background(), bad, nil, &bytes.Buffer{}), "SLUICE_X")

	broken := b
	broken.Build = func(config, service.Deps) (service.Runner, error) { return nil, errors.New("wiring failed") }
	require.ErrorContains(t, service.Run(context.Background(), broken, nil, &bytes.Buffer{}), "wiring failed")

	require.Error(t, service.Run(context.Background(), service.Binary[config]{Name: "x"}, nil, &bytes.Buffer{}))
}

func TestLogNoticesLogsAtTheEdge(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	notify := service.LogNotices(zerolog.New(&buf))
	notify(bus.Notice{Kind: bus.NoticeAsyncError, Subject: "sluice.events.x.>", Err: errors.New("permissions violation")})
	notify(bus.Notice{Kind: bus.NoticeConnectFailed, Err: errors.New("refused"), RetryIn: time.Second})
	out := buf.String()
	require.Contains(t, out, `"level":"warn","error":"permissions violation","subject":"sluice.events.x.>","message":"nats async error"`)
	require.Contains(t, out, `"retry_in":1000,"message":"nats connect failed"`)
}

func TestRunWarnsAboutFormerNames(t *testing.T) {
	t.Parallel()
	b := binary(t, false, make(chan *probe, 1))
	renamed := []envconfig.Deprecation{
		{Old: "SLUICE_OLD_WAIT", New: "SLUICE_PROBE_WAIT"},
		{Old: "SLUICE_OLD_MAX", New: "SLUICE_PROBE_MAX", Ignored: true},
	}
	common := b.Common
	b.Common = func(c config) service.Common {
		cm := common(c)
		cm.Deprecated = renamed
		return cm
	}
	b.Build = func(config, service.Deps) (service.Runner, error) { return nil, errors.New("stop here") }
	var logs bytes.Buffer
	require.ErrorContains(t, service.Run(context.Background(), b, nil, &logs), "stop here")
	out := logs.String()
	require.Contains(t, out, `"level":"warn","service":"probe","variable":"SLUICE_OLD_WAIT","use":"SLUICE_PROBE_WAIT","ignored":false`)
	require.Contains(t, out, renamed[0].Message())
	require.Contains(t, out, `"variable":"SLUICE_OLD_MAX","use":"SLUICE_PROBE_MAX","ignored":true`)
}
