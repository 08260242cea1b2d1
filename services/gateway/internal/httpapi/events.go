package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/client/sse"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
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

// sseStream writes Server-Sent Events to one client.
type sseStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers 200 with the event-stream headers. The server's write
// timeout would end a long stream, so each write gets its own deadline.
func startSSE(w http.ResponseWriter) (*sseStream, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s := &sseStream{w: w, rc: http.NewResponseController(w)}
	if err := s.deadline(); err != nil {
		return nil, err
	}
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", sseRetryMS); err != nil {
		return nil, fmt.Errorf("sse: %w", err)
	}
	return s, s.flush()
}

// send writes one event: its id (a stream sequence), type and JSON data.
func (s *sseStream) send(id uint64, event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sse: encode %s: %w", event, err)
	}
	if err := s.deadline(); err != nil {
		return err
	}
	// The encoding is the one pkg/client's reader decodes.
	if err := sse.Write(s.w, sse.Event{ID: strconv.FormatUint(id, 10), Type: event, Data: string(data)}); err != nil {
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

// lastEventID reads where a client resumes: the Last-Event-ID header, or
// the since query parameter; 0 means from now on. since reports whether
// the id came from the query (which must name an id the stream issued).
func lastEventID(r *http.Request) (id uint64, since bool, err error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("since")
		since = v != ""
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, errors.New("Last-Event-ID (or since) must be a non-negative event id")
	}
	return n, since, nil
}

// checkSince answers 400 (and reports false) when ?since= names an event id
// past the newest the event stream issued. A Last-Event-ID past it is
// accepted (the stream was recreated and its numbers restarted; the client
// resumes from now), because a browser's EventSource cannot recover from a
// 4xx answer to its reconnect.
func (a *api) checkSince(w http.ResponseWriter, r *http.Request, after uint64, since bool) bool {
	if !since || after == 0 || a.JS == nil {
		return true
	}
	last, err := events.LastSeq(r.Context(), a.JS)
	if err != nil {
		noteCause(r, err) // cannot tell: follow from now on
		return true
	}
	if after > last {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest,
			fmt.Sprintf("since=%d: no such event id (the newest is %d)", after, last))
		return false
	}
	return true
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
	after, since, err := lastEventID(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, err.Error())
		return
	}
	if !a.checkSince(w, r, after, since) {
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
		a.finalStream(w, r, job, after)
		return
	}
	if !a.takeStream(w, tenant) {
		return
	}
	defer a.releaseStream(tenant)

	var follow <-chan events.Received
	seq := after
	if a.JS != nil {
		f, ferr := events.FollowJob(ctx, a.JS, job.Tenant, job.ID, after)
		if ferr == nil {
			defer f.Close()
			follow, seq = f.C(), f.Start
			if job, err = a.Store.Get(ctx, id); err != nil {
				noteCause(r, err)
				writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
				return
			}
		} else {
			noteCause(r, ferr) // followed by polling the store alone
		}
	}
	sse, err := startSSE(w)
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
// snapshot, then the end of the stream. A reconnect (Last-Event-ID or
// since given) after which the job has no event left, the final one
// included, is answered 204 No Content instead, so the client stops; so
// is one when the event stream cannot tell, since the client had a stream
// of the job before (GET /v1/jobs/{id} has the final job). The snapshot
// carries the id of the newest event, so reconnecting after it ends with
// the 204.
func (a *api) finalStream(w http.ResponseWriter, r *http.Request, job contracts.Job, after uint64) {
	ctx := r.Context()
	if resuming(r) {
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
		if last, err := events.LastSeq(ctx, a.JS); err == nil {
			seq = max(seq, last)
		} else {
			noteCause(r, err)
		}
	}
	sse, err := startSSE(w)
	if err != nil {
		return
	}
	_ = sse.send(seq, contracts.EventSnapshot, job)
}

// resuming reports whether r reconnects to a stream: it names the last
// event it saw (Last-Event-ID, or the since query parameter).
func resuming(r *http.Request) bool {
	return r.Header.Get("Last-Event-ID") != "" || r.URL.Query().Get("since") != ""
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
	after, since, err := lastEventID(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, err.Error())
		return
	}
	if !a.checkSince(w, r, after, since) {
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
	sse, err := startSSE(w)
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
