package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Defaults of a follower.
const (
	defaultPollEvery   = 500 * time.Millisecond
	defaultReconnects  = 5
	defaultBackoff     = 250 * time.Millisecond
	maxBackoff         = 5 * time.Second
	defaultIdleTimeout = 45 * time.Second // three missed 15 s pings
)

// follower follows one job to its final state: through its event stream
// (GET /v1/jobs/{id}/events), reconnecting with Last-Event-ID when the
// stream drops, and by polling GET /v1/jobs/{id} when the server has no
// event stream or it keeps failing.
type follower struct {
	client *Client
	// onUpdate is told every change, the first snapshot included.
	onUpdate func(Update)
	// onNote is told what the follower does about trouble (reconnects,
	// falling back to polling); nil = silent.
	onNote func(string)

	pollEvery   time.Duration
	reconnects  int
	backoff     time.Duration
	idleTimeout time.Duration
	// serverRetry is the reconnection delay the server asked for in its
	// stream ("retry:"), zero until it does.
	serverRetry time.Duration
}

// newFollower returns a follower with the default timings.
func newFollower(c *Client, onUpdate func(Update)) *follower {
	return &follower{
		client: c, onUpdate: onUpdate,
		pollEvery: defaultPollEvery, reconnects: defaultReconnects,
		backoff: defaultBackoff, idleTimeout: defaultIdleTimeout,
	}
}

func (f *follower) note(format string, args ...any) {
	if f.onNote != nil {
		f.onNote(fmt.Sprintf(format, args...))
	}
}

// follow follows job id until it is final and returns it, read again from
// the server so it carries its result, with the server's JSON of it (nil
// when that last read failed). The error is the context's when it ends
// first.
func (f *follower) follow(ctx context.Context, id string) (contracts.Job, []byte, error) {
	var (
		job      contracts.Job
		have     bool
		lastID   string
		failures int
		path     = eventsURL(id)
	)
	for {
		body, err := f.client.openEvents(ctx, path, lastID)
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return job, nil, ctx.Err()
		case errors.Is(err, errStreamOver),
			errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed):
			// 204: the job is final (poll returns at once). 404 or 405:
			// either the job does not exist or the server has no event
			// stream. Reading the job tells which.
			cur, raw, gerr := f.client.Job(ctx, id)
			if gerr != nil {
				return job, nil, gerr
			}
			return f.poll(ctx, id, job, have, cur, raw)
		case errors.Is(err, errNoEventStream):
			return f.poll(ctx, id, job, have, contracts.Job{}, nil)
		case errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests:
			return job, nil, err // 400, 401: trying again will not help
		case err == nil:
			final, got, err := f.read(ctx, body, &job, &have, &lastID)
			body.Close()
			if final {
				job, raw := f.final(ctx, job)
				return job, raw, nil
			}
			if ctx.Err() != nil {
				return job, nil, ctx.Err()
			}
			if got {
				failures = 0
			}
			f.note("the event stream dropped (%s); reconnecting", dropReason(err))
		default:
			f.note("cannot open the event stream (%v); retrying", err)
		}
		failures++
		if failures > f.reconnects {
			f.note("the event stream keeps failing; polling the job instead")
			return f.poll(ctx, id, job, have, contracts.Job{}, nil)
		}
		if err := sleep(ctx, backoffFor(cmp.Or(f.serverRetry, f.backoff), failures)); err != nil {
			return job, nil, err
		}
	}
}

// read reads one connection's events into job. It reports whether the job
// reached a final state and whether any event arrived.
func (f *follower) read(ctx context.Context, body io.ReadCloser, job *contracts.Job, have *bool, lastID *string) (final, got bool, err error) {
	idle := newIdleCloser(body, f.idleTimeout)
	defer idle.stop()
	r := sse.NewReader(idle)
	defer func() {
		if d := r.Retry(); d > 0 {
			f.serverRetry = d
		}
	}()
	for {
		ev, err := r.Next()
		if err != nil {
			if idle.fired() {
				err = fmt.Errorf("no data for %s", f.idleTimeout)
			}
			return false, got, err
		}
		if ctx.Err() != nil {
			return false, got, ctx.Err()
		}
		got = true
		*lastID = r.LastID()
		switch ev.Type {
		case contracts.EventSnapshot:
			snap, err := decodeSnapshot(ev.Data)
			if err != nil {
				return false, got, err
			}
			*job, *have = snap, true
			f.onUpdate(Update{Event: snapshotEvent(snap), Job: snap})
		case contracts.EventState, contracts.EventProgress:
			e, err := decodeEvent(ev.Type, ev.Data)
			if err != nil {
				return false, got, err
			}
			if !*have || !apply(job, e) {
				continue
			}
			f.onUpdate(Update{Event: e, Job: *job})
		default:
			continue // an event type this client does not know
		}
		if job.State.Final() {
			return true, got, nil
		}
	}
}

// poll follows the job by reading it every pollEvery. cur (with its JSON
// raw), when it has an id, is a read the caller already made.
func (f *follower) poll(ctx context.Context, id string, job contracts.Job, have bool, cur contracts.Job, raw []byte) (contracts.Job, []byte, error) {
	failures := 0
	for {
		if cur.ID == "" {
			var err error
			cur, raw, err = f.client.Job(ctx, id)
			var ae *APIError
			switch {
			case ctx.Err() != nil:
				return job, nil, ctx.Err()
			case errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests:
				return job, nil, err
			case err != nil:
				failures++
				if failures > f.reconnects {
					return job, nil, err
				}
				f.note("cannot read the job (%v); retrying", err)
				if err := sleep(ctx, backoffFor(f.backoff, failures)); err != nil {
					return job, nil, err
				}
				continue
			}
			failures = 0
		}
		if !have {
			job, have = cur, true
			f.onUpdate(Update{Event: snapshotEvent(cur), Job: cur})
		} else {
			for _, ev := range diff(job, cur) {
				f.onUpdate(Update{Event: ev, Job: cur})
			}
			job = cur
		}
		if job.State.Final() {
			return job, raw, nil
		}
		cur = contracts.Job{}
		if err := sleep(ctx, f.pollEvery); err != nil {
			return job, nil, err
		}
	}
}

// final reads a job that reached its final state again, for what events do
// not carry (its result, its exact finish time); on failure the job as the
// events left it will do.
func (f *follower) final(ctx context.Context, job contracts.Job) (contracts.Job, []byte) {
	got, raw, err := f.client.Job(ctx, job.ID)
	if err != nil || !got.State.Final() {
		return job, nil
	}
	return got, raw
}

// backoffFor is the wait before retry n (1, 2, …): base doubled each time,
// at most maxBackoff.
func backoffFor(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// dropReason says why a stream ended: the server closed it (err is nil or
// io.EOF), or how reading it failed.
func dropReason(err error) string {
	if err == nil || errors.Is(err, io.EOF) {
		return "closed by the server"
	}
	return err.Error()
}
