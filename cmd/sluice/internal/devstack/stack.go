// Package devstack runs the whole of Sluice in one process: an embedded
// NATS server with JetStream, the embedded store, a gateway, schedulers,
// workers and a reaper, each with its own NATS connection as if it were
// its own process. It is what `make run` and `sluice dev` start, and what
// the end-to-end tests drive.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// Options shape a stack. The zero value runs the default: settings from the
// process environment, two workers, one scheduler.
type Options struct {
	// Environ replaces the process environment for every service's config.
	Environ map[string]string
	// Workers is how many workers to run (default 2; -1 = none).
	Workers int
	// Schedulers is how many scheduler replicas to run (default 1).
	Schedulers int
	// NoReaper leaves the reaper out.
	NoReaper bool
	// NATSListen is where the embedded NATS server accepts outside clients
	// (default 127.0.0.1:4222; "127.0.0.1:0" picks a free port).
	NATSListen string
	// HTTPListener, when set, serves the gateway instead of SLUICE_HTTP_ADDR.
	HTTPListener net.Listener
	// SetupWorker runs on each worker before it starts (register kinds).
	SetupWorker func(i int, w *worker.Worker) error
	// Log receives every service's logs.
	Log zerolog.Logger
}

// Stack is a running all-in-one Sluice.
type Stack struct {
	// NATS is the embedded server (nil when SLUICE_NATS_URL names an
	// outside one); NATSURL reaches the server from outside.
	NATS    *server.Server
	NATSURL string
	// Store is the embedded store every service shares.
	Store store.Store
	// HTTPAddr is the gateway's address.
	HTTPAddr string
	// Gateway, Schedulers, Workers and Reaper are the services.
	Gateway    *gateway.Gateway
	Schedulers []*scheduler.Scheduler
	Workers    []*worker.Worker
	Reaper     *reaper.Reaper
	// Registry holds the metrics of the gateway, the first scheduler, the
	// workers and the reaper; the gateway serves it on /metrics.
	Registry *prometheus.Registry

	conns []*nats.Conn
	ln    net.Listener
	opts  Options
	// auth closes the embedded server in token mode (nil otherwise): the
	// services connect as its internal user, each worker as its own.
	auth *bus.EmbeddedAuth
	// spawner starts workers on scale requests (SLUICE_SCHEDULER_SPAWN=dev).
	spawner *devSpawner
}

// Start builds the stack; Run runs it. On error everything already started
// is stopped.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.Schedulers <= 0 {
		o.Schedulers = 1
	}
	if o.NATSListen == "" {
		o.NATSListen = "127.0.0.1:4222"
	}
	gcfg, err := gateway.LoadConfig(o.Environ)
	if err != nil {
		return nil, err
	}
	scfg, err := scheduler.LoadConfig(o.Environ)
	if err != nil {
		return nil, err
	}
	rcfg, err := reaper.LoadConfig(o.Environ)
	if err != nil {
		return nil, err
	}
	wcfg, err := worker.LoadConfig(o.Environ)
	if err != nil {
		return nil, err
	}
	service.LogDeprecations(svcLog(o.Log, "gateway"), gcfg.Deprecated)
	service.LogDeprecations(svcLog(o.Log, "scheduler"), scfg.Deprecated)
	service.LogDeprecations(svcLog(o.Log, "worker"), wcfg.Deprecated)
	service.LogDeprecations(svcLog(o.Log, "reaper"), rcfg.Deprecated)
	s := &Stack{opts: o, Registry: observe.NewRegistry()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	dataDir := gcfg.Store.DataDir
	natsUser, natsPassword := gcfg.Bus.User, gcfg.Bus.Password
	if gcfg.Bus.URL != "" {
		s.NATSURL = gcfg.Bus.URL // an outside server (SLUICE_NATS_URL)
	} else {
		eo := bus.EmbeddedOptions{Dir: filepath.Join(dataDir, "nats"), Listen: o.NATSListen, ServerName: "sluice-dev",
			MaxPayload: gcfg.NATSMaxPayload()}
		if tenant := gcfg.TokenAuth(); tenant != nil {
			// Token mode: outside clients need a tenant's token; the
			// services here connect as the internal user, and each
			// worker as its own user with its own password
			// (WorkerCredentials), which may use its own subjects only.
			pw, err := bus.NewInternalPassword()
			if err != nil {
				return nil, err
			}
			s.auth = &bus.EmbeddedAuth{InternalPassword: pw, Tenant: tenant}
			eo.Auth = s.auth
			natsUser, natsPassword = bus.InternalUser, pw
		}
		s.NATS, err = bus.StartEmbedded(eo)
		if err != nil {
			return nil, err
		}
		s.NATSURL = s.NATS.ClientURL()
	}
	s.Store, err = dial.Open(ctx, gcfg.Store)
	if err != nil {
		return nil, err
	}
	if err = service.RegisterStoreWrites(s.Registry, s.Store); err != nil {
		return nil, fmt.Errorf("register the store's write counts: %w", err)
	}
	connectAs := func(name, user, password string) (*nats.Conn, jetstream.JetStream, error) {
		co := bus.ConnectOptions{URL: s.NATSURL, Name: name, User: user, Password: password, Notify: service.LogNotices(o.Log)}
		if s.NATS != nil {
			co.InProcess = s.NATS
		}
		nc, err := bus.Connect(ctx, co)
		if err != nil {
			return nil, nil, err
		}
		s.conns = append(s.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, nil, fmt.Errorf("jetstream: %w", err)
		}
		return nc, js, nil
	}
	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		return connectAs(name, natsUser, natsPassword)
	}
	// A worker connects as itself in token mode, else as the services do.
	connectWorker := func(id string) (*nats.Conn, jetstream.JetStream, error) {
		if user, password := s.WorkerCredentials(id); user != "" {
			return connectAs("sluice-"+id, user, password)
		}
		return connect("sluice-" + id)
	}
	if _, js, err := connect("sluice-dev-setup"); err != nil {
		return nil, err
	} else if _, err := bus.EnsureStream(ctx, js); err != nil {
		return nil, err
	}

	nc, js, err := connect("sluice-gateway")
	if err != nil {
		return nil, err
	}
	s.Gateway, err = gateway.New(gcfg, gateway.Deps{Store: s.Store, NC: nc, JS: js, Log: svcLog(o.Log, "gateway"), Registry: s.Registry})
	if err != nil {
		return nil, err
	}
	if o.HTTPListener != nil {
		s.ln = o.HTTPListener
	} else if s.ln, err = net.Listen("tcp", gcfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("SLUICE_HTTP_ADDR: listen %s: %w", gcfg.HTTPAddr, err)
	}
	s.HTTPAddr = s.ln.Addr().String()

	for i := range o.Schedulers {
		nc, js, err := connect(fmt.Sprintf("sluice-scheduler-%d", i+1))
		if err != nil {
			return nil, err
		}
		reg := prometheus.NewRegistry()
		if i == 0 {
			reg = s.Registry // the first replica's metrics show on the gateway's /metrics
		}
		sc, err := scheduler.New(scfg, scheduler.Deps{Store: s.Store, NC: nc, JS: js, Log: svcLog(o.Log, "scheduler"), Registry: reg})
		if err != nil {
			return nil, err
		}
		s.Schedulers = append(s.Schedulers, sc)
	}
	for i := range max(o.Workers, 0) {
		c := wcfg
		if !explicitWorkerID(o.Environ) || o.Workers > 1 {
			c.WorkerID = fmt.Sprintf("worker-%02d", i+1)
		}
		nc, js, err := connectWorker(c.WorkerID)
		if err != nil {
			return nil, err
		}
		// The workers' metrics show on the gateway's /metrics too.
		w, err := worker.New(c, worker.Deps{NC: nc, JS: js, Log: svcLog(o.Log, "worker"), Registry: s.Registry})
		if err != nil {
			return nil, err
		}
		if o.SetupWorker != nil {
			if err := o.SetupWorker(i, w); err != nil {
				return nil, err
			}
		}
		s.Workers = append(s.Workers, w)
	}
	if scfg.Spawn == "dev" {
		nc, _, err := connect("sluice-dev-spawner")
		if err != nil {
			return nil, err
		}
		s.spawner = &devSpawner{cfg: wcfg, nc: nc, connect: connectWorker}
	}
	if !o.NoReaper {
		nc, js, err := connect("sluice-reaper")
		if err != nil {
			return nil, err
		}
		s.Reaper, err = reaper.New(rcfg, reaper.Deps{Store: s.Store, NC: nc, JS: js, Log: svcLog(o.Log, "reaper"), Registry: s.Registry})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WorkerCredentials are the NATS user and password a worker named id
// connects to the stack's embedded server with in token mode: its own
// (bus.WorkerUser, bus.EmbeddedAuth.WorkerPassword), good for its own
// subjects only. A worker process the stack's owner starts gets them in
// SLUICE_NATS_USER and SLUICE_NATS_PASSWORD. Both are empty in open mode
// and with an outside server, whose own configuration names the users.
func (s *Stack) WorkerCredentials(id string) (user, password string) {
	if s.auth == nil {
		return "", ""
	}
	return bus.WorkerUser(id), s.auth.WorkerPassword(id)
}

// explicitWorkerID reports whether SLUICE_WORKER_ID was set; otherwise the
// stack names its workers worker-01, worker-02, … so their order is stable.
func explicitWorkerID(environ map[string]string) bool {
	if environ != nil {
		return environ["SLUICE_WORKER_ID"] != ""
	}
	return os.Getenv("SLUICE_WORKER_ID") != ""
}

func svcLog(l zerolog.Logger, name string) zerolog.Logger {
	return l.With().Str("component", name).Logger()
}

// Run runs every service until ctx ends or one fails, then stops them all
// and closes the store and the NATS server. Workers drain first, while the
// scheduler is still there to record their results and heartbeats.
func (s *Stack) Run(ctx context.Context) error {
	defer s.close()
	svcCtx, stopSvcs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvcs()
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()

	var workers sync.WaitGroup
	for _, w := range s.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			if err := w.Run(wctx); err != nil {
				s.opts.Log.Error().Err(err).Str("worker_id", w.ID()).Msg("worker stopped with an error")
			}
		}()
	}
	if s.spawner != nil {
		err := s.spawner.start(wctx, func(err error, msg string) {
			s.opts.Log.Error().Err(err).Msg(msg)
		})
		if err != nil {
			stopWorkers()
			workers.Wait()
			return err
		}
	}
	stopSpawned := func() {
		if s.spawner != nil {
			s.spawner.stop()
		}
	}
	go func() {
		<-wctx.Done()
		workers.Wait()
		stopSpawned()
		stopSvcs()
	}()

	g := new(errgroup.Group)
	run := func(f func(context.Context) error) {
		g.Go(func() error {
			err := f(svcCtx)
			if err != nil && !errors.Is(err, context.Canceled) {
				stopWorkers() // one service failed: stop everything
				return err
			}
			return nil
		})
	}
	run(func(c context.Context) error { return s.Gateway.Serve(c, s.ln) })
	for _, sc := range s.Schedulers {
		run(sc.Run)
	}
	if s.Reaper != nil {
		run(s.Reaper.Run)
	}
	err := g.Wait()
	stopWorkers()
	workers.Wait()
	stopSpawned()
	return err
}

// close releases everything Start opened, in reverse order.
func (s *Stack) close() {
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
	if s.Store != nil {
		_ = s.Store.Close()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
		s.NATS.WaitForShutdown()
	}
}

// ShutdownGrace is how long Run may take to stop after its context ends.
const ShutdownGrace = 30 * time.Second
