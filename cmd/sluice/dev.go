package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/sluicehq/sluice/cmd/sluice/internal/devstack"
	"github.com/sluicehq/sluice/pkg/observe"
)

// devHelp is the head of `sluice dev -h`, in the form of the other
// commands' help; the flags and their defaults follow.
const devHelp = `usage: sluice dev [--workers N] [--nats-listen ADDR]

dev runs the whole system in one process until interrupted: an embedded NATS
server with JetStream, the embedded store under SLUICE_DATA_DIR (default
./.sluice), the gateway on SLUICE_HTTP_ADDR with its dashboard, a scheduler,
the workers and a reaper. Every service reads its SLUICE_* variables.

flags:
`

// dev runs the all-in-one stack until interrupted.
func dev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defWorkers, err := devWorkers(os.Getenv("SLUICE_DEV_WORKERS"))
	if err != nil {
		fmt.Fprintln(stderr, "sluice dev:", err)
		return exitUsage
	}
	// The flag package prints each default after its usage: the usages
	// name only the variable it comes from.
	workers := fs.Int("workers", defWorkers, "run `N` workers, or SLUICE_DEV_WORKERS")
	natsListen := fs.String("nats-listen", envOr("SLUICE_NATS_LISTEN", "127.0.0.1:4222"),
		"the embedded NATS server accepts outside clients on `ADDR`, or SLUICE_NATS_LISTEN")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, devHelp)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return exitOK
		}
		fmt.Fprintf(stderr, "Run 'sluice dev -h' for help.\n")
		return exitUsage
	}
	if *workers < 0 {
		fmt.Fprintln(stderr, "sluice dev: --workers must not be negative")
		return exitUsage
	}
	if *workers == 0 {
		*workers = -1
	}
	log := observe.NewLogger("sluice-dev", stderr, os.Getenv("SLUICE_LOG_LEVEL"), envOr("SLUICE_LOG_FORMAT", "console"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := devstack.Start(ctx, devstack.Options{Workers: *workers, NATSListen: *natsListen, Log: log})
	if err != nil {
		fmt.Fprintln(stderr, "sluice dev:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, `Sluice is running.
  Dashboard  http://%[1]s/
  HTTP API   http://%[1]s/v1/   (counts and workers: GET /v1/stats)
  NATS       %[2]s
  data dir   %[3]s

Submit a job:
  curl -s -XPOST http://%[1]s/v1/jobs -H 'Content-Type: application/json' -d '{"kind":"sleep","payload":{"ms":500}}'
Watch it:
  curl -s http://%[1]s/v1/jobs/<id>
Stop with Ctrl-C.
`, s.HTTPAddr, s.NATSURL, dataDir())
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "sluice dev:", err)
		return exitFail
	}
	return exitOK
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func dataDir() string { return envOr("SLUICE_DATA_DIR", "./.sluice") }

// devWorkers is the default of --workers: SLUICE_DEV_WORKERS when set, else 2.
func devWorkers(v string) (int, error) {
	if v == "" {
		return 2, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("SLUICE_DEV_WORKERS: want a number of workers (0 or more), got %q", v)
	}
	return n, nil
}
