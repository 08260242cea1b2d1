package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/gateway/internal/eventid"
)

// Server-Sent Events timings.
const (
	// ssePing is how often an idle stream sends a comment, so proxies and
	// clients see the connection is alive.
	ssePing = 15 * time.Second
	// ssePoll is how often a job's stream re-reads the job from the store
	// when it cannot follow the event stream (NATS down, stream deleted),
	// so the stream is delayed but never left hanging.
	ssePoll = 2 * time.Second
	// ssePollFollowing is how often it re-reads the job while it follows
	// the event stream, which carries every change: only in case an event
	// was never published. 1,000 streams re-read 33 jobs a second, not
	// 500, and the store's read pool serves them beside the writes.
	ssePollFollowing = 30 * time.Second
	// sseRetryMS is the reconnect delay the stream suggests to clients.
	sseRetryMS = 2000
	// sseWriteTimeout bounds one write to a slow client.
	sseWriteTimeout = 10 * time.Second
)

// sseStream writes Server-Sent Events to one client of tenant.
type sseStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	ids    *eventid.Codec
	tenant string
}

// startSSE answers 200 with the event-stream headers. The server's write
// timeout would end a long stream, so each write gets its own deadline.
func (a *api) startSSE(w http.ResponseWriter, tenant string) (*sseStream, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s := &sseStream{w: w, rc: http.NewResponseController(w), ids: a.eventIDs, tenant: tenant}
	if err := s.deadline(); err != nil {
		return nil, err
	}
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", sseRetryMS); err != nil {
		return nil, fmt.Errorf("sse: %w", err)
	}
	return s, s.flush()
}

// send writes one event: its id (the tenant's id of stream sequence
// seq), type and JSON data.
func (s *sseStream) send(seq uint64, event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sse: encode %s: %w", event, err)
	}
	if err := s.deadline(); err != nil {
		return err
	}
	// The encoding is the one pkg/client's reader decodes.
	if err := sse.Write(s.w, sse.Event{ID: s.ids.ID(s.tenant, seq), Type: event, Data: string(data)}); err != nil {
		return err
	}
	return s.flush()
}

// ping writes a comment line.
func (s *sseStream) ping() error {
	if err := s.deadline(); err != nil {
		return err
	}
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return fmt.Errorf("sse: %w", err)
	}
	return s.flush()
}

// deadline gives the next write sseWriteTimeout.
func (s *sseStream) deadline() error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("sse: write deadline: %w", err)
	}
	return nil
}

func (s *sseStream) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("sse: flush: %w", err)
	}
	return nil
}

// msgBadSince is the answer to a ?since= that is not an event id.
const msgBadSince = "since must be an event id this server sent to this tenant"

// resumeAfter reads where tenant's client resumes: the stream sequence of
// the event id in its Last-Event-ID header, or in the since query
// parameter; 0 means from now on. resuming reports whether it named one.
// Event ids are opaque (eventid): one that is not tenant's is a 400 in
// ?since=, and from now on in Last-Event-ID, because a browser's
// EventSource cannot recover from a 4xx answer to its reconnect (an id of
// a stream that was recreated, or of an earlier release, is such a one).
// Neither answer says anything of the stream's other events.
func (a *api) resumeAfter(r *http.Request, tenant string) (seq uint64, resuming bool, err error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		seq, _ = a.eventIDs.Seq(tenant, v)
		return seq, true, nil
	}
	v := r.URL.Query().Get("since")
	if v == "" {
		return 0, false, nil
	}
	seq, ok := a.eventIDs.Seq(tenant, v)
	if !ok {
		return 0, false, errors.New(msgBadSince)
	}
	return seq, true, nil
}

// jobEvents is GET /v1/jobs/{id}/events: a snapshot of the job, then its
// state and progress events, closing after the final state.
//
// The follower is started before the snapshot is read, so no change falls
// between them; events the snapshot already shows are skipped. A job that
// is already final gets its snapshot and the stream closes (finalStream),
// but a reconnect past its final event is answered 204 No Content: that is
// how Server-Sent Events tell a client (a browser's EventSource, the npm
// eventsource package) to stop reconnecting. When the event stream cannot
// be read the job is still followed by re-reading it from the store.
func (a *api) jobEvents(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if !contracts.ValidJobID(id) {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, msgBadID)
		return
	}
	after, resuming, err := a.resumeAfter(r, tenant)
	if err != nil {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	job, err := a.Store.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && job.Tenant != tenant:
		writeError(w, http.StatusNotFound, contracts.CodeNotFound, msgNotFound)
		return
	case err != nil:
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
		return
	}
	if job.State.Final() {
		a.finalStream(w, r, job, after, resuming)
		return
	}
	if !a.takeStream(w, tenant) {
		return
	}
	defer a.releaseStream(tenant)

	var follow <-chan events.Received
	seq := after
	if a.JS != nil {
		// A new stream follows from the newest event of the job's subject,
		// read before the snapshot (which then shows all it says), and
		// the snapshot carries its id: not the stream's newest event, the
		// follower's start otherwise, whose id would change with every
		// event of every tenant.
		if after == 0 {
			if last, err := events.LastJobSeq(ctx, a.JS, job.Tenant, job.ID); err == nil {
				seq = last
			} else {
				noteCause(r, err)
			}
		}
		f, ferr := events.FollowJob(ctx, a.JS, job.Tenant, job.ID, seq)
		if ferr == nil {
			defer f.Close()
			follow = f.C()
			if seq > f.Start {
				seq = 0 // from before the stream was recreated
			}
			if job, err = a.Store.Get(ctx, id); err != nil {
				noteCause(r, err)
				writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
				return
			}
		} else {
			noteCause(r, ferr) // followed by polling the store alone
		}
	}
	sse, err := a.startSSE(w, tenant)
	if err != nil {
		return
	}
	if sse.send(seq, contracts.EventSnapshot, job) != nil || job.State.Final() {
		return
	}
	cur := contracts.StateEvent(job)
	var lastProgress contracts.Event // the last progress event sent
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	every := ssePoll
	if follow != nil {
		every = ssePollFollowing
	}
	poll := time.NewTicker(every)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if sse.ping() != nil {
				return
			}
		case rcv, ok := <-follow:
			if !ok {
				follow = nil // the store poll carries on, at its quick pace
				poll.Reset(ssePoll)
				continue
			}
			seq = rcv.Seq
			ev := rcv.Event
			if ev.Type == contracts.EventState {
				if !newer(ev, cur) {
					continue
				}
				cur = ev
			} else if ev.Claim < cur.Claim || !laterProgress(ev, lastProgress) {
				continue
			} else {
				lastProgress = ev
			}
			if sse.send(rcv.Seq, ev.Type, ev) != nil || (ev.Type == contracts.EventState && ev.State.Final()) {
				return
			}
		case <-poll.C:
			now, err := a.Store.Get(ctx, id)
			if err != nil {
				continue
			}
			ev := contracts.StateEvent(now)
			if now.State == cur.State && now.Claim == cur.Claim {
				continue
			}
			cur = ev
			if sse.send(seq, contracts.EventState, ev) != nil || ev.State.Final() {
				return
			}
		}
	}
}

// finalStream answers the event stream of a job already final: its
// snapshot, then the end of the stream. A reconnect (resuming: an event id
// given) after which the job has no event left, the final one included,
// is answered 204 No Content instead, so the client stops; so is one when
// the event stream cannot tell, since the client had a stream of the job
// before (GET /v1/jobs/{id} has the final job). The snapshot carries the
// id of the newest event of the job's subject (never the stream's newest,
// which counts other tenants' events), so reconnecting after it ends with
// the 204.
func (a *api) finalStream(w http.ResponseWriter, r *http.Request, job contracts.Job, after uint64, resuming bool) {
	ctx := r.Context()
	if resuming {
		left := false
		if a.JS != nil {
			var err error
			if left, err = events.JobEventAfter(ctx, a.JS, job.Tenant, job.ID, after); err != nil {
				noteCause(r, err)
				left = false
			}
		}
		if !left {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	seq := after
	if a.JS != nil {
		if last, err := events.LastJobSeq(ctx, a.JS, job.Tenant, job.ID); err == nil {
			seq = max(seq, last)
		} else {
			noteCause(r, err)
		}
	}
	sse, err := a.startSSE(w, job.Tenant)
	if err != nil {
		return
	}
	_ = sse.send(seq, contracts.EventSnapshot, job)
}

// newer reports whether a state event says something the stream has not
// sent yet: a change after the one last sent, not the same one again.
func newer(ev, cur contracts.Event) bool {
	if ev.Claim < cur.Claim || ev.At.Before(cur.At) {
		return false
	}
	same := ev.State == cur.State && ev.Claim == cur.Claim && ev.Worker == cur.Worker && ev.Error == cur.Error
	return !same
}

// laterProgress reports whether progress event ev is not older than last,
// the progress event the stream sent before: several services publish a
// job's progress (a fan-out parent's is published by every service that
// ends one of its children), and one that read the job earlier may
// publish later. Going back to an older report would show the reader its
// job's progress moving backwards.
func laterProgress(ev, last contracts.Event) bool {
	return ev.Claim > last.Claim || !ev.At.Before(last.At)
}

// tenantEvents is GET /v1/events: every state and progress event of the
// caller's tenant, from now on or after Last-Event-ID. It ends only when
// the client goes away or the event stream fails (the client then
// reconnects with the last id it saw).
func (a *api) tenantEvents(w http.ResponseWriter, r *http.Request, tenant string) {
	after, _, err := a.resumeAfter(r, tenant)
	if err != nil {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, err.Error())
		return
	}
	if a.JS == nil {
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "events are not available")
		return
	}
	if !a.takeStream(w, tenant) {
		return
	}
	defer a.releaseStream(tenant)
	ctx := r.Context()
	f, err := events.Follow(ctx, a.JS, contracts.TenantEventSubjects(tenant), after)
	if err != nil {
		noteCause(r, err)
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "the event stream is unavailable, try again")
		return
	}
	defer f.Close()
	sse, err := a.startSSE(w, tenant)
	if err != nil {
		return
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if sse.ping() != nil {
				return
			}
		case rcv, ok := <-f.C():
			if !ok {
				noteCause(r, f.Err())
				return
			}
			if sse.send(rcv.Seq, rcv.Event.Type, rcv.Event) != nil {
				return
			}
		}
	}
}
