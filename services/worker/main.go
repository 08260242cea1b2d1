// Command worker runs a Sluice worker: it announces itself on NATS, takes
// the jobs the scheduler offers up to its limit, and exits by itself after
// its idle timeout or max lifetime. Configuration comes from SLUICE_*
// environment variables (see worker.Config).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := worker.LoadConfig(nil)
	if err != nil {
		return err
	}
	log := observe.NewLogger("worker", nil, cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	link, err := bus.Dial(ctx, cfg.BusEnv, cfg.DataDir, "sluice-worker-"+cfg.WorkerID, log)
	if err != nil {
		return err
	}
	defer func() { _ = link.Close() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, err := worker.New(cfg, link.Conn, link.JS, log, worker.WithRegisterer(reg))
	if err != nil {
		return err
	}
	probe := observe.NewProbe(log, reg)
	probe.AddCheck("nats", func(ctx context.Context) error { return bus.Check(ctx, link.Conn, nil) })
	probe.AddCheck("worker", func(context.Context) error {
		if w.Draining() {
			return errors.New("draining")
		}
		return nil
	})

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error {
		defer cancel() // the worker may stop by itself (idle timeout, max lifetime)
		return w.Run(gctx)
	})
	g.Go(func() error { return probe.Serve(gctx, cfg.HTTPAddr) })
	return g.Wait()
}
