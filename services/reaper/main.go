// Command reaper runs the Sluice reaper: it recovers stale and lost jobs,
// enforces the hard max runtime, purges old finished jobs and repairs
// admission counters.
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
	"github.com/sluicehq/sluice/services/reaper/reaper"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := reaper.LoadConfig(nil)
	if err != nil {
		return err
	}
	log := observe.NewLogger("reaper", os.Stderr, cfg.Log.LogLevel, cfg.Log.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := dial.OpenRetry(ctx, cfg.Store, func(err error, next time.Duration) {
		log.Warn().Err(err).Dur("retry_in", next).Msg("store unavailable")
	})
	if err != nil {
		return err
	}
	defer st.Close()
	link, err := bus.Dial(ctx, cfg.Bus, cfg.Store.DataDir, "sluice-reaper", log)
	if err != nil {
		return err
	}
	defer link.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r, err := reaper.New(cfg, reaper.Deps{Store: st, NC: link.Conn, JS: link.JS, Log: log, Registry: reg})
	if err != nil {
		return err
	}
	log.Info().Dur("interval", cfg.Interval).Msg("reaper started")
	return r.Run(ctx)
}
