// Package events publishes and reads Sluice's job change events: the
// SLUICE_EVENTS JetStream stream, a few hundred subjects per tenant that
// its jobs share (see contracts.EventSubject).
//
// Events are notifications, never the record. They are published with a
// plain core NATS publish after the store's compare-and-set succeeded: no
// acknowledgement is awaited, so an event can be lost (NATS down, the
// stream deleted) and readers start from a snapshot read from the store.
// The stream keeps events for a while (limits retention) so a reader can
// resume from a stream sequence (the SSE Last-Event-ID).
package events

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Retention of the event stream: whichever limit is reached first drops
// the oldest events.
const (
	// MaxAge is how long an event is kept.
	MaxAge = time.Hour
	// MaxBytes bounds the stream's size.
	MaxBytes = 256 << 20
)

// StreamConfig is the event stream: file storage, limits retention, oldest
// events dropped first.
func StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        contracts.EventStreamName,
		Description: "Sluice job change events (notifications; the store is the record)",
		Subjects:    []string{contracts.EventStreamSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      MaxAge,
		MaxBytes:    MaxBytes,
		Replicas:    1,
	}
}

// EnsureStream returns the event stream, creating it when it is missing.
// An existing stream is left as it is, but for a limit of messages per
// subject, which older releases set: with a subject per bucket of jobs
// (contracts.EventSubject) such a limit would shorten how far back a
// resume reaches, so it is lifted once. Nothing else is updated in place:
// a deployment's own changes to the stream stay.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := bus.EnsureStreamConfig(ctx, js, StreamConfig())
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	if info == nil || info.Config.MaxMsgsPerSubject <= 0 {
		return s, nil
	}
	cfg := info.Config
	cfg.MaxMsgsPerSubject = -1
	u, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("lift the per-subject limit of stream %s: %w", cfg.Name, err)
	}
	return u, nil
}

// Publisher sends change events. It is safe for concurrent use; a nil
// *Publisher publishes nothing, so components can run without events.
type Publisher struct {
	nc      *nats.Conn
	dropped atomic.Int64
	// child, when set, hears the parent of every fan-out child whose
	// state event goes out: the parent's counts changed too.
	child func(parent string)
	// bufs holds buffers events are encoded into, for reuse.
	bufs sync.Pool
}

// NewPublisher returns a Publisher on nc.
func NewPublisher(nc *nats.Conn) *Publisher { return &Publisher{nc: nc} }

// WithChildren returns p calling fn with the parent of every fan-out
// child whose state event it publishes (fn must not block).
func (p *Publisher) WithChildren(fn func(parent string)) *Publisher {
	p.child = fn
	return p
}

// Publish sends ev without waiting for anything. An event that cannot be
// sent is counted (Dropped) and otherwise ignored: the store already holds
// the change.
func (p *Publisher) Publish(ev contracts.Event) {
	if p == nil {
		return
	}
	bp, _ := p.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	data, err := contracts.AppendEvent((*bp)[:0], ev)
	if err == nil {
		// Publish copies data into the connection's buffer before it returns.
		err = p.nc.Publish(ev.Subject(), data)
	}
	if err != nil {
		p.dropped.Add(1)
	}
	if cap(data) <= maxPooledEvent {
		*bp = data[:0]
		p.bufs.Put(bp)
	}
}

// maxPooledEvent bounds the encoding buffers kept for reuse.
const maxPooledEvent = 4 << 10

// State publishes a state event for job as it is after a change.
func (p *Publisher) State(job contracts.Job) {
	if p == nil {
		return
	}
	p.Publish(contracts.StateEvent(job))
	if job.Parent != "" && p.child != nil {
		p.child(job.Parent)
	}
}

// Dropped says how many events could not be sent.
func (p *Publisher) Dropped() int64 {
	if p == nil {
		return 0
	}
	return p.dropped.Load()
}
