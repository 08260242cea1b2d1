// Command probeworker is the chaos harness's worker: the real Sluice worker
// (package worker, configured from the same SLUICE_* environment) with one
// more kind, "probe", whose handler journals every run (see package
// journal). The harness reads the journals to measure whether two workers
// ever ran one job in overlapping attempts.
//
//	probeworker -journal /tmp/chaos/journal/worker-1.journal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func main() {
	path := flag.String("journal", "", "journal file to append to (required)")
	step := flag.Duration("step", 10*time.Millisecond, "how long the probe handler sleeps between checks of its context")
	flag.Parse()
	if err := run(*path, *step); err != nil {
		fmt.Fprintln(os.Stderr, "probeworker:", err)
		os.Exit(1)
	}
}

func run(path string, step time.Duration) error {
	if path == "" {
		return errors.New("-journal is required")
	}
	if step <= 0 {
		return fmt.Errorf("-step %s must be positive", step)
	}
	cfg, err := worker.LoadConfig(nil)
	if err != nil {
		return fmt.Errorf("load config: %w", err)
	}
	log := observe.NewLogger("worker", nil, cfg.Log.LogLevel, cfg.Log.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	j, err := journal.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = j.Close() }()

	link, err := bus.Dial(ctx, cfg.Bus, cfg.DataDir, "sluice-probeworker-"+cfg.WorkerID, service.LogNotices(log))
	if err != nil {
		return fmt.Errorf("dial nats: %w", err)
	}
	defer func() { _ = link.Close() }()

	w, err := worker.New(cfg, worker.Deps{NC: link.Conn, JS: link.JS, Log: log})
	if err != nil {
		return fmt.Errorf("new worker: %w", err)
	}
	p := &probe{journal: j, workerID: cfg.WorkerID, pid: os.Getpid(), step: step, capacity: cfg.Capacity(), log: log}
	if err := w.Handle(Kind, p.handle); err != nil {
		return fmt.Errorf("register %s: %w", Kind, err)
	}
	return w.Run(ctx)
}
