package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

var cmdWatch = &command{
	name:    "watch",
	summary: "follow a job to its end, or every job of your tenant",
	usage:   "watch <id> [--json] | watch [--all] [--since EVENT-ID] [--json]",
	help: `
watch <id> follows one job until it ends: a live progress bar on a
terminal (state changes as lines above it), one line per change otherwise.
--json prints one JSON event per line instead: first a "snapshot" event
made from the job, then "state" and "progress" events as the API sends
them. The exit code is the job's outcome.

watch (or watch --all) follows every job of your tenant, one line per
change (with --json, one JSON event per line), until interrupted; it
starts with new changes, or with --since after the event of EVENT-ID (an
opaque id an event stream of your tenant sent, its "id:" field).

If the event stream drops, watch reconnects where it left off; if the
server has no event stream, watch <id> polls the job instead.

exit codes: watch <id>: 0 succeeded, 1 failed or server error, 3 cancelled,
130 interrupted; watch --all: 0 when interrupted, 1 when the server cannot
be reached. 2 usage.`,
	run: runWatch,
}

func runWatch(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	all := fs.Bool("all", false, "follow every job of your tenant (the default without an id)")
	since := fs.String("since", "", "with --all: start after the event with this id")
	pos, err := inv.parse(fs, args, 0, 1)
	if err != nil {
		return 0, err
	}
	if len(pos) == 1 {
		if *all || *since != "" {
			return 0, &usageError{"--all and --since follow every job: give no id"}
		}
		if err := checkID(pos[0]); err != nil {
			return 0, err
		}
		return followJob(ctx, inv, pos[0], true)
	}
	if *since != "" && !eventIDText(*since) {
		return 0, &usageError{fmt.Sprintf("--since: %q is not an event id", *since)}
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	var d display
	if inv.g.json {
		d = &jsonDisplay{out: inv.env.Stdout, errw: inv.env.Stderr}
	} else {
		d = newLineDisplay(inv.env.Stdout, inv.env.Stderr, true)
	}
	tw := &tenantWatcher{client: c, show: d, reconnects: defaultReconnects, backoff: defaultBackoff, idleTimeout: defaultIdleTimeout}
	err = tw.run(ctx, *since)
	if ctx.Err() != nil {
		return ExitOK, nil // interrupted: the normal end of watching everything
	}
	return 0, err
}

// tenantWatcher follows GET /v1/events until its context ends,
// reconnecting with Last-Event-ID when the stream drops.
type tenantWatcher struct {
	client      *Client
	show        display
	reconnects  int
	backoff     time.Duration
	idleTimeout time.Duration
	// serverRetry is the reconnection delay the server asked for.
	serverRetry time.Duration
	// shown is the last state shown per job. A job shows one final line:
	// a final state that reaches the stream again (a redelivered or
	// republished event, which need not read the same to the letter) is
	// not shown twice.
	shown map[string]shownState
}

// shownState is what the watcher last showed of a job.
type shownState struct {
	state contracts.JobState
	claim int64
}

// maxShown bounds tenantWatcher.shown; past it the memory starts over.
const maxShown = 100_000

// fresh reports whether a state event is a change not shown yet, and
// remembers it.
func (tw *tenantWatcher) fresh(e contracts.Event) bool {
	if tw.shown == nil || len(tw.shown) >= maxShown {
		tw.shown = map[string]shownState{}
	}
	s := shownState{state: e.State, claim: e.Claim}
	if prev, ok := tw.shown[e.JobID]; ok && (prev == s || prev.state.Final()) {
		return false
	}
	tw.shown[e.JobID] = s
	return true
}

// run follows the stream, starting after event since when it is not
// empty. It returns when ctx ends, or with an error when the stream cannot
// be opened reconnects times in a row or the server has none.
func (tw *tenantWatcher) run(ctx context.Context, since string) error {
	lastID := since
	failures := 0
	for {
		body, err := tw.client.openEvents(ctx, "/v1/events", lastID)
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed),
			errors.Is(err, errNoEventStream):
			return fmt.Errorf("the server at %s has no event stream (GET /v1/events): %w", tw.client.Base(), err)
		case errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests:
			return err
		case err == nil:
			got, rerr := tw.read(ctx, body, &lastID)
			body.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if got {
				failures = 0
			}
			err = errors.New(dropReason(rerr))
			tw.show.note(fmt.Sprintf("the event stream dropped (%v); reconnecting", err))
		default:
			tw.show.note(fmt.Sprintf("cannot open the event stream (%v); retrying", err))
		}
		failures++
		if failures > tw.reconnects {
			return fmt.Errorf("the event stream keeps failing: %w", err)
		}
		if err := sleep(ctx, backoffFor(cmp.Or(tw.serverRetry, tw.backoff), failures)); err != nil {
			return err
		}
	}
}

// read shows one connection's events and reports whether any arrived.
func (tw *tenantWatcher) read(ctx context.Context, body io.ReadCloser, lastID *string) (bool, error) {
	idle := newIdleCloser(body, tw.idleTimeout)
	defer idle.stop()
	r := sse.NewReader(idle)
	defer func() {
		if d := r.Retry(); d > 0 {
			tw.serverRetry = d
		}
	}()
	got := false
	for {
		ev, err := r.Next()
		if err != nil {
			if idle.fired() {
				err = fmt.Errorf("no data for %s", tw.idleTimeout)
			}
			return got, err
		}
		if ctx.Err() != nil {
			return got, ctx.Err()
		}
		got = true
		*lastID = r.LastID()
		if ev.Type != contracts.EventState && ev.Type != contracts.EventProgress {
			continue
		}
		e, err := decodeEvent(ev.Type, ev.Data)
		if err != nil {
			tw.show.note(err.Error())
			continue
		}
		if e.Type == contracts.EventState && !tw.fresh(e) {
			continue
		}
		tw.show.update(Update{Event: e})
	}
}

// eventsURL is the path of one job's event stream.
func eventsURL(id string) string { return "/v1/jobs/" + url.PathEscape(id) + "/events" }

// eventIDText reports whether s can be an event id: 1-128 visible ASCII
// characters. The ids are opaque; the server says whether it sent one.
func eventIDText(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
