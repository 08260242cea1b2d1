// Command embedded-worker is a Go service that uses Sluice as a library:
// it embeds a worker that runs jobs of its own kind, "greet", submits one
// such job through the Go client, waits for it and prints its result.
//
// Start a stack without built-in workers, then run the service:
//
//	sluice dev --workers 0     # or: make run
//	GOWORK=off go run .        # in examples/embedded-worker
//
// It reads the SLUICE_* environment as a worker does (SLUICE_NATS_URL,
// default nats://127.0.0.1:4222 where `sluice dev` listens), and SLUICE_URL
// (default http://127.0.0.1:8080) and SLUICE_TOKEN for the HTTP API.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embedded-worker:", err)
		os.Exit(1)
	}
}

// run embeds the worker, submits a greet job, prints its outcome and stops
// the worker.
func run(ctx context.Context, out io.Writer) error {
	cfg, err := worker.LoadConfig(nil) // the SLUICE_* environment
	if err != nil {
		return err
	}
	if cfg.Bus.URL == "" {
		cfg.Bus.URL = nats.DefaultURL // where `sluice dev` listens
	}
	var opts []nats.Option
	if cfg.Bus.User != "" {
		opts = append(opts, nats.UserInfo(cfg.Bus.User, cfg.Bus.Password))
	}
	nc, err := nats.Connect(cfg.Bus.URL, opts...)
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()

	w, err := embedWorker(cfg, nc)
	if err != nil {
		return err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }() // returns once wctx ends and its jobs are done

	final, err := submitAndWait(ctx, env("SLUICE_URL", "http://127.0.0.1:8080"))
	stopWorker()
	if werr := <-ran; werr != nil {
		err = errors.Join(err, fmt.Errorf("worker: %w", werr))
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, final.State, string(final.Result))
	if final.State != contracts.StateSucceeded {
		return fmt.Errorf("job %s ended %s: %s", final.ID, final.State, final.Error)
	}
	return nil
}

// embedWorker builds a worker that runs greet jobs, {"name":"Ada"} giving
// {"greeting":"Hello, Ada"}, and no built-in kind; Run starts it.
func embedWorker(cfg worker.Config, nc *nats.Conn) (*worker.Worker, error) {
	cfg.Kinds = nil // no built-in kinds (sleep, exec): only those registered here
	w, err := worker.New(cfg, worker.Deps{NC: nc})
	if err != nil {
		return nil, err
	}
	return w, w.Handle("greet", func(ctx context.Context, job worker.Job) (worker.Result, error) {
		var in struct{ Name string }
		if err := json.Unmarshal(job.Payload, &in); err != nil {
			return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: err} // fails at once, never retried
		}
		return worker.JSON(map[string]string{"greeting": "Hello, " + in.Name})
	})
}

// submitAndWait submits a greet job through the Go client and waits until
// it ends.
func submitAndWait(ctx context.Context, url string) (contracts.Job, error) {
	c, err := client.New(url, client.WithToken(os.Getenv("SLUICE_TOKEN")))
	if err != nil {
		return contracts.Job{}, err
	}
	job, _, err := c.Submit(ctx, contracts.SubmitRequest{Kind: "greet", Payload: json.RawMessage(`{"name":"Ada"}`)})
	if err != nil {
		return contracts.Job{}, fmt.Errorf("submit: %w", err) // errors.Is(err, client.ErrRejected) on a 429
	}
	return c.Wait(ctx, job.ID, nil) // follows the job's events until it ends, then reads it
}

// env is the variable's value, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
