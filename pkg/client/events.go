package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Reconnection of event streams.
const (
	// maxReconnects is how many failed (re)connections in a row end a follow.
	maxReconnects = 5
	// reconnectBase is the first wait before reconnecting; it doubles.
	reconnectBase = 250 * time.Millisecond
	// reconnectMax bounds one wait.
	reconnectMax = 5 * time.Second
)

// ErrStreamOver is the gateway's 204 No Content to an event stream: it has
// nothing more to send (the job is final) and must not be reconnected.
var ErrStreamOver = errors.New("client: the event stream is over")

// ErrNoEventStream means the server answered an event stream request with
// something that is not one.
var ErrNoEventStream = errors.New("client: the server did not answer with an event stream")

// Wait follows job id until it is final and returns it as the store has it
// (with its result), calling onEvent (when not nil) with every state and
// progress event meanwhile. A job already final is returned at once.
func (c *Client) Wait(ctx context.Context, id string, onEvent func(contracts.Event)) (contracts.Job, error) {
	if err := c.Follow(ctx, id, onEvent); err != nil {
		return contracts.Job{}, err
	}
	return c.Get(ctx, id)
}

// Follow reads job id's event stream until the job is final, calling fn
// with each state and progress event (the first one is the job's current
// state), reconnecting with Last-Event-ID when the stream drops.
func (c *Client) Follow(ctx context.Context, id string, fn func(contracts.Event)) error {
	if fn == nil {
		fn = func(contracts.Event) {}
	}
	path := "/v1/jobs/" + url.PathEscape(id) + "/events"
	final := false
	err := c.stream(ctx, path, "", func(typ string, data []byte) error {
		ev, err := decodeStreamEvent(typ, data)
		if err != nil {
			return err
		}
		fn(ev)
		if ev.Type == contracts.EventState && ev.State.Final() {
			final = true
			return ErrStreamOver
		}
		return nil
	})
	if errors.Is(err, ErrStreamOver) {
		if !final { // 204: it ended before we came; tell fn its end
			job, gerr := c.Get(ctx, id)
			if gerr != nil {
				return gerr
			}
			fn(contracts.StateEvent(job))
		}
		return nil
	}
	return err
}

// FollowTenant reads every state and progress event of the caller's
// tenant, after event id since ("" = from now on), until ctx ends (then it
// returns ctx's error) or the stream keeps failing. fn gets each event with
// its id, which a later FollowTenant may resume after.
func (c *Client) FollowTenant(ctx context.Context, since string, fn func(id string, ev contracts.Event)) error {
	var last string
	return c.stream(ctx, "/v1/events", since, func(typ string, data []byte) error {
		ev, err := decodeStreamEvent(typ, data)
		if err != nil {
			return err
		}
		fn(last, ev)
		return nil
	}, func(id string) { last = id })
}

// stream reads the event stream at path, resuming after lastID, and hands
// each event to handle until handle returns an error (returned as is) or
// ctx ends; it reconnects after drops, at most maxReconnects times in a row
// without an event. seen, when given, learns each event's id first.
func (c *Client) stream(ctx context.Context, path, lastID string, handle func(typ string, data []byte) error, seen ...func(id string)) error {
	failures := 0
	var lastErr error
	for {
		got, err := c.readStream(ctx, path, &lastID, handle, seen...)
		var ce *Error
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrStreamOver), errors.Is(err, ErrNoEventStream):
			return err
		case errors.As(err, &ce) && ce.Status < 500 && ce.Status != http.StatusTooManyRequests:
			return err // 400, 401, 404: trying again will not help
		case errors.As(err, new(handlerError)):
			return errors.Unwrap(err) // the handler refused an event
		}
		if got {
			failures = 0
		}
		failures++
		lastErr = err
		if failures > maxReconnects {
			return fmt.Errorf("client: the event stream %s keeps failing: %w", path, lastErr)
		}
		wait := min(reconnectBase<<(failures-1), reconnectMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// readStream reads one connection; got says whether any event came.
func (c *Client) readStream(ctx context.Context, path string, lastID *string, handle func(string, []byte) error, seen ...func(string)) (got bool, err error) {
	body, err := c.OpenEvents(ctx, path, *lastID)
	if err != nil {
		return false, err
	}
	defer body.Close()
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if err != nil {
			return got, err
		}
		got = true
		*lastID = r.LastID()
		for _, s := range seen {
			s(*lastID)
		}
		if ev.Type != contracts.EventSnapshot && ev.Type != contracts.EventState && ev.Type != contracts.EventProgress {
			continue
		}
		if err := handle(ev.Type, []byte(ev.Data)); err != nil {
			if errors.Is(err, ErrStreamOver) {
				return got, err
			}
			return got, handlerError{err}
		}
	}
}

// OpenEvents opens the event stream at path (a job's or the tenant's),
// resuming after event lastID when it is not empty, for callers that read
// it themselves with package sse. A 204 is ErrStreamOver, an answer that
// is not an event stream ErrNoEventStream, an error answer an *Error. The
// caller closes the body.
func (c *Client) OpenEvents(ctx context.Context, path, lastID string) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNoContent:
		resp.Body.Close()
		return nil, ErrStreamOver
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, newError(resp.StatusCode, resp.Header, data)
	case !strings.HasPrefix(strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Type"))), "text/event-stream"):
		resp.Body.Close()
		return nil, ErrNoEventStream
	}
	return resp.Body, nil
}

// decodeStreamEvent turns one event's data into an Event: a snapshot (the
// whole job) becomes the state event of the job as it is.
func decodeStreamEvent(typ string, data []byte) (contracts.Event, error) {
	if typ == contracts.EventSnapshot {
		var job contracts.Job
		if err := json.Unmarshal(data, &job); err != nil {
			return contracts.Event{}, fmt.Errorf("client: decode a snapshot: %w", err)
		}
		ev := contracts.StateEvent(job)
		ev.Progress = job.Progress
		return ev, nil
	}
	ev, err := contracts.DecodeEvent(data)
	if err != nil {
		return contracts.Event{}, fmt.Errorf("client: %w", err)
	}
	return ev, nil
}

// handlerError is an event a handler refused: it ends the follow.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }
func (e handlerError) Unwrap() error { return e.err }
