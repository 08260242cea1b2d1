package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/pkg/contracts"
)

var cmdCancel = &command{
	name:    "cancel",
	summary: "cancel a job",
	usage:   "cancel <id> [--wait] [--json]",
	help: `
Cancels a job and prints its state afterwards: "cancelled" for a job that
was pending (or already cancelled), "running (cancel requested)" for a
running job, which ends cancelled when its worker has stopped it. --wait
then follows the job until it ends and exits with its outcome (a job may
still succeed if it finished before its worker heard of the cancel).
--json prints the job as the API returns it.

A job that already ended otherwise cannot be cancelled: the message says
how it ended, and the exit code is 1.

exit codes: 0 cancelled or cancel requested (with --wait: the outcome, 3
when cancelled), 1 already finished, not found or server error, 2 usage.`,
	run: runCancel,
}

// finishedError is a cancel refused because the job already ended.
type finishedError struct {
	id    string
	state contracts.JobState
	api   *APIError
}

// Error implements error.
func (e *finishedError) Error() string {
	if e.state == "" {
		return fmt.Sprintf("job %s already finished: %s", e.id, e.api.Message)
	}
	return fmt.Sprintf("job %s already %s; there is nothing to cancel", e.id, e.state)
}

// Unwrap returns the server's answer.
func (e *finishedError) Unwrap() error { return e.api }

func runCancel(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	wait := fs.Bool("wait", false, "follow the job until it ends; exit with its outcome")
	pos, err := inv.parse(fs, args, 1, 1)
	if err != nil {
		return 0, err
	}
	id := pos[0]
	if err := checkID(id); err != nil {
		return 0, err
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	job, raw, err := c.Cancel(ctx, id)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		fe := &finishedError{id: id, api: ae}
		if cur, _, gerr := c.Job(ctx, id); gerr == nil {
			fe.state = cur.State
		}
		return 0, fe
	}
	if err != nil {
		return 0, err
	}
	if *wait {
		if !inv.g.json {
			fmt.Fprintln(inv.env.Stdout, cancelState(job))
		}
		return followJob(ctx, inv, id, false)
	}
	if inv.g.json {
		inv.writeJSON(raw)
	} else {
		fmt.Fprintln(inv.env.Stdout, cancelState(job))
	}
	return ExitOK, nil
}

// cancelState is the state of a job after a cancel, for people.
func cancelState(j contracts.Job) string {
	if j.CancelRequested && !j.State.Final() {
		return string(j.State) + " (cancel requested)"
	}
	return string(j.State)
}
