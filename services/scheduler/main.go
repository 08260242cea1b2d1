// Command scheduler runs one Sluice scheduler replica: it dispatches due
// jobs to workers and applies their results, heartbeats and requeues.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := scheduler.LoadConfig(nil)
	if err != nil {
		return err
	}
	log := observe.NewLogger("scheduler", os.Stderr, cfg.Log.LogLevel, cfg.Log.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := dial.OpenRetry(ctx, cfg.Store, func(err error, next time.Duration) {
		log.Warn().Err(err).Dur("retry_in", next).Msg("store unavailable")
	})
	if err != nil {
		return err
	}
	defer st.Close()
	link, err := bus.Dial(ctx, cfg.Bus, cfg.Store.DataDir, "sluice-scheduler", log)
	if err != nil {
		return err
	}
	defer link.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s, err := scheduler.New(cfg, scheduler.Deps{Store: st, NC: link.Conn, JS: link.JS, Log: log, Registry: reg})
	if err != nil {
		return err
	}
	log.Info().Msg("scheduler started")
	return s.Run(ctx)
}
