package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// maxListLimit is the largest page the server hands out.
const maxListLimit = 500

// errorColumn bounds the ERROR column of the table on a terminal.
const errorColumn = 60

var cmdLs = &command{
	name:    "ls",
	summary: "list jobs, newest first",
	usage:   "ls [--state STATE] [--kind KIND] [--parent ID] [--limit N] [--cursor C | --all] [--json]",
	help: `
Lists the jobs of your tenant, newest first, as a table: id, kind, state,
attempt (the run number: how many times it went running, of its max
attempts), claim (the
dispatch claim counter that fences stale results: not a run count), worker,
age (since it was submitted), wait (until a worker started it), run (how
long it ran or has been running) and error. A '*' after the state means a
cancel was requested and the worker has not stopped yet.

A fan-out parent is one row (its attempt column shows its children finished
of the total); --parent ID lists that parent's children instead.

One page at a time: when there are more, stderr shows the --cursor of the
next page. --all fetches every page (--limit is then the page size). --json
prints the API's page ({"jobs":[…],"next_cursor":…}); with --all, one page
holding every job.

exit codes: 0 listed (also when there is no job), 1 server error, 2 usage.`,
	run: runLs,
}

func runLs(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	state := fs.String("state", "", "only jobs in this state: pending, running, succeeded, failed, cancelled")
	kind := fs.String("kind", "", "only jobs of this kind")
	parent := fs.String("parent", "", "the children of this fan-out parent")
	limit := fs.Int("limit", 0, fmt.Sprintf("jobs per page, 1 to %d (default: the server's, 50)", maxListLimit))
	cursor := fs.String("cursor", "", "the page after this cursor (from a previous listing)")
	all := fs.Bool("all", false, "fetch every page")
	if _, err := inv.parse(fs, args, 0, 0); err != nil {
		return 0, err
	}
	q := ListQuery{Kind: *kind, Parent: *parent, Limit: *limit, Cursor: *cursor}
	if q.Parent != "" && !contracts.ValidJobID(q.Parent) {
		return 0, &usageError{fmt.Sprintf("--parent: %q is not a job id", q.Parent)}
	}
	if *state != "" {
		st, err := contracts.ParseJobState(*state)
		if err != nil {
			return 0, &usageError{"--state: " + err.Error()}
		}
		q.State = st
	}
	if q.Kind != "" && !contracts.ValidKind(q.Kind) {
		return 0, &usageError{fmt.Sprintf("--kind: %q is not a job kind", q.Kind)}
	}
	if *limit < 0 || *limit > maxListLimit {
		return 0, &usageError{fmt.Sprintf("--limit must be between 1 and %d", maxListLimit)}
	}
	if *all && *cursor != "" {
		return 0, &usageError{"--all and --cursor do not go together"}
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	page, raw, err := c.List(ctx, q)
	if err != nil {
		return 0, err
	}
	jobs := page.Jobs
	for *all && page.NextCursor != "" {
		q.Cursor = page.NextCursor
		if page, _, err = c.List(ctx, q); err != nil {
			return 0, err
		}
		jobs = append(jobs, page.Jobs...)
	}
	if inv.g.json {
		if *all {
			raw, err = json.Marshal(contracts.JobPage{Jobs: jobs})
			if err != nil {
				return 0, fmt.Errorf("encode the jobs: %w", err)
			}
		}
		inv.writeJSON(raw)
		return ExitOK, nil
	}
	if len(jobs) == 0 {
		fmt.Fprintln(inv.env.Stderr, "no jobs")
		return ExitOK, nil
	}
	errWidth := 0
	if ok, _ := inv.env.Terminal(inv.env.Stdout); ok {
		errWidth = errorColumn
	}
	writeJobTable(inv.env.Stdout, jobs, inv.env.Now(), errWidth)
	if !*all && page.NextCursor != "" {
		fmt.Fprintf(inv.env.Stderr, "more: sluice ls --cursor %s\n", page.NextCursor)
	}
	return ExitOK, nil
}

// writeJobTable writes jobs as a table. errWidth > 0 truncates the error
// column to that many characters.
func writeJobTable(w io.Writer, jobs []contracts.Job, now time.Time, errWidth int) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tATTEMPT\tCLAIM\tWORKER\tAGE\tWAIT\tRUN\tERROR")
	for _, j := range jobs {
		errText := sanitize(j.Error)
		if errWidth > 0 {
			errText = truncate(errText, errWidth)
		}
		state := string(j.State)
		if j.CancelRequested && !j.State.Final() {
			state += "*"
		}
		attempt, total := j.Attempt, j.MaxAttempts
		worker := orDash(sanitize(j.Worker))
		if j.Children != nil {
			// A fan-out parent runs nothing itself: its children finished.
			attempt, total = j.Children.Finished(), j.Children.Total
			worker = fmt.Sprintf("(%d running)", j.Children.Running)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\n",
			j.ID, sanitize(j.Kind), state, attempt, total, j.Claim, worker,
			durationOr(now.Sub(j.CreatedAt), !j.CreatedAt.IsZero()),
			durationOr(waitTime(j, now)), durationOr(runTime(j, now)),
			strings.TrimSpace(errText))
	}
	_ = tw.flush()
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
