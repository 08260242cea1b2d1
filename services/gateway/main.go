// Command gateway runs Sluice's gateway: the HTTP API v1 and the NATS
// submit endpoint in front of the job store. Configuration comes from
// SLUICE_* environment variables (see package gateway).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := gateway.LoadConfig(nil)
	if err != nil {
		return err
	}
	log := observe.NewLogger("gateway", nil, cfg.Log.LogLevel, cfg.Log.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := dial.OpenRetry(ctx, cfg.Store, func(err error, next time.Duration) {
		log.Warn().Err(err).Dur("retry_in", next).Msg("store unavailable")
	})
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	link, err := bus.Dial(ctx, cfg.Bus, cfg.Store.DataDir, "sluice-gateway", log)
	if err != nil {
		return err
	}
	defer func() { _ = link.Close() }()

	gw, err := gateway.New(cfg, gateway.Deps{Store: st, NC: link.Conn, JS: link.JS, Log: log})
	if err != nil {
		return err
	}
	return gw.Run(ctx)
}
