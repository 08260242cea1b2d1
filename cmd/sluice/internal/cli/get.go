package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

var cmdGet = &command{
	name:    "get",
	summary: "show a job",
	usage:   "get <id> [--json]",
	help: `
Shows one job as "key: value" lines; --json prints it as the API returns it.

exit codes: 0 when the job exists, whatever its state (use 'sluice watch' to
get an exit code from its outcome), 1 when it does not or the server cannot
be asked, 2 usage.`,
	run: runGet,
}

func runGet(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	pos, err := inv.parse(fs, args, 1, 1)
	if err != nil {
		return 0, err
	}
	if err := checkID(pos[0]); err != nil {
		return 0, err
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	job, raw, err := c.Job(ctx, pos[0])
	if err != nil {
		return 0, err
	}
	if inv.g.json {
		inv.writeJSON(raw)
		return ExitOK, nil
	}
	writeJobView(inv.env.Stdout, job, inv.env.Now())
	return ExitOK, nil
}

// writeJobView writes a job as aligned "key: value" lines, leaving out
// what the job does not have.
func writeJobView(w io.Writer, j contracts.Job, now time.Time) {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-*s%s\n", jobKeyWidth, k+":", v) }
	row("id", j.ID)
	row("kind", sanitize(j.Kind))
	state := string(j.State)
	if j.CancelRequested && !j.State.Final() {
		state += " (cancel requested)"
	}
	row("state", state)
	row("attempt", fmt.Sprintf("%d of at most %d (the run number)", j.Attempt, j.MaxAttempts))
	row("claim", fmt.Sprintf("%d (dispatch claims so far; it fences stale results, it is not a run count)", j.Claim))
	if j.Worker != "" {
		row("worker", sanitize(j.Worker))
	}
	if j.Key != "" {
		row("key", sanitize(j.Key))
	}
	row("tenant", sanitize(j.Tenant))
	row("priority", fmt.Sprint(j.Priority))
	if j.ConcurrencyKey != "" {
		row("key limit", fmt.Sprintf("%s: at most %d at once", sanitize(j.ConcurrencyKey), j.ConcurrencyLimit))
	}
	if j.RunAt != nil {
		row("run at", fmtTime(*j.RunAt))
	}
	if !j.CreatedAt.IsZero() {
		row("created", fmt.Sprintf("%s (%s ago)", fmtTime(j.CreatedAt), fmtDuration(now.Sub(j.CreatedAt))))
	}
	if j.StartedAt != nil {
		d, _ := waitTime(j, now)
		row("started", fmt.Sprintf("%s (waited %s)", fmtTime(*j.StartedAt), fmtDuration(d)))
	} else if d, ok := waitTime(j, now); ok && j.State == contracts.StatePending {
		row("waiting", fmtDuration(d))
	}
	if j.FinishedAt != nil {
		text := fmtTime(*j.FinishedAt)
		if d, ok := runTime(j, now); ok {
			text += fmt.Sprintf(" (ran %s)", fmtDuration(d))
		}
		row("finished", text)
	} else if d, ok := runTime(j, now); ok {
		row("running", fmtDuration(d))
	}
	if j.State == contracts.StatePending && j.NextDispatchAt != nil && j.NextDispatchAt.After(now) {
		row("next offer", fmt.Sprintf("in %s", fmtDuration(j.NextDispatchAt.Sub(now))))
	}
	if !j.State.Final() && !j.DispatchDeadline.IsZero() && j.StartedAt == nil {
		row("deadline", fmtTime(j.DispatchDeadline))
	}
	if j.Resources != nil {
		row("resources", fmtResources(*j.Resources))
	}
	if j.Usage != nil {
		row("used", fmtUsage(*j.Usage))
	}
	if j.Progress != nil {
		row("progress", fmtProgress(j.Progress))
	}
	if j.Error != "" {
		row("error", sanitize(j.Error))
	}
	for _, e := range j.Errors {
		if e.Error == j.Error && e.Attempt == j.Attempt && j.State.Final() {
			continue // the final error, already shown
		}
		row(fmt.Sprintf("run %d", e.Attempt), sanitize(e.Error))
	}
	if len(j.Payload) > 0 {
		row("payload", sanitize(strings.TrimSpace(string(j.Payload))))
	}
	if len(j.Result) > 0 {
		row("result", sanitize(strings.TrimSpace(string(j.Result))))
	}
	_, _ = io.WriteString(w, b.String())
}

// fmtResources writes a job's request ("cpu 0.5, memory 512MiB"); what
// it leaves out is the worker's default.
func fmtResources(r contracts.Resources) string {
	var parts []string
	if r.CPU != 0 {
		parts = append(parts, "cpu "+strconv.FormatFloat(r.CPU, 'f', -1, 64))
	}
	if r.Memory != 0 {
		parts = append(parts, "memory "+contracts.FormatMemory(r.Memory))
	}
	if len(parts) < 2 {
		parts = append(parts, "the rest the worker's default")
	}
	return strings.Join(parts, ", ")
}

// fmtUsage writes what a run used ("peak memory 67.0MiB, 0.25 cpu-seconds
// (cgroup-v2)").
func fmtUsage(u contracts.Usage) string {
	return fmt.Sprintf("peak memory %s, %s cpu-seconds (%s)", fmtBytes(u.PeakMemory),
		strconv.FormatFloat(u.CPUSeconds, 'f', -1, 64), sanitize(string(u.Mechanism)))
}

// fmtBytes writes a byte count with one decimal of its IEC unit.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f%s", v, []string{"KiB", "MiB", "GiB", "TiB"}[i])
}

// jobKeyWidth is the width of the key column of the job view: the longest
// key ("next offer:") and a space, so values line up whatever is shown.
const jobKeyWidth = 12
