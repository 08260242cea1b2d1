package events

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Received is one event read from the stream, with its stream sequence
// (the SSE event id).
type Received struct {
	Seq   uint64
	Event contracts.Event
}

// Follower reads the events of one subject filter in stream order. Build it
// with Follow; read C until it is closed; Close it when done.
type Follower struct {
	// Start is the sequence the follower started after: the stream's last
	// sequence when it was created, or the requested one if older.
	Start uint64

	c    chan Received
	keep func(contracts.Event) bool // nil keeps every event
	it   jetstream.MessagesContext
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	mu   sync.Mutex
	err  error
}

// Follow starts reading filter's events after sequence after; after 0, or
// beyond the stream's end (the stream was recreated and numbers restarted),
// means only events newer than now. Events older than the stream keeps are
// gone: reading resumes at the oldest kept. The stream is created if
// missing.
func Follow(ctx context.Context, js jetstream.JetStream, filter string, after uint64) (*Follower, error) {
	return follow(ctx, js, filter, after, nil)
}

// FollowJob is Follow of one job's events: those of its subject
// (contracts.EventSubject) whose JobID is jobID.
func FollowJob(ctx context.Context, js jetstream.JetStream, tenant, jobID string, after uint64) (*Follower, error) {
	return follow(ctx, js, contracts.EventSubject(tenant, jobID), after, func(ev contracts.Event) bool { return ev.JobID == jobID })
}

func follow(ctx context.Context, js jetstream.JetStream, filter string, after uint64, keep func(contracts.Event) bool) (*Follower, error) {
	s, err := EnsureStream(ctx, js)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("follow %s: stream info: %w", filter, err)
	}
	last := info.State.LastSeq
	if after == 0 || after > last {
		after = last
	}
	cons, err := js.OrderedConsumer(ctx, contracts.EventStreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", filter, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", filter, err)
	}
	f := &Follower{Start: after, c: make(chan Received, 64), keep: keep, it: it, done: make(chan struct{})}
	f.wg.Add(1)
	go f.pump()
	return f, nil
}

// C delivers the events; it is closed when the follower stops (Close, or
// the subscription failed: see Err).
func (f *Follower) C() <-chan Received { return f.c }

// Err says why C was closed early; nil after Close.
func (f *Follower) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close stops the follower and waits for its goroutine.
func (f *Follower) Close() {
	f.once.Do(func() {
		close(f.done)
		f.it.Stop()
	})
	f.wg.Wait()
}

// pump moves messages from the consumer to C. Malformed events, and those
// keep refuses, are skipped.
func (f *Follower) pump() {
	defer f.wg.Done()
	defer close(f.c)
	for {
		msg, err := f.it.Next()
		if err != nil {
			select {
			case <-f.done:
			default:
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					f.mu.Lock()
					f.err = fmt.Errorf("follow events: %w", err)
					f.mu.Unlock()
				}
			}
			return
		}
		meta, err := msg.Metadata()
		if err != nil {
			continue
		}
		ev, err := contracts.DecodeEvent(msg.Data())
		if err != nil || (f.keep != nil && !f.keep(ev)) {
			continue
		}
		select {
		case f.c <- Received{Seq: meta.Sequence.Stream, Event: ev}:
		case <-f.done:
			return
		}
	}
}

// LastSeq returns the sequence of the newest event the stream holds (0 for
// an empty stream): no event id past it was ever issued by this stream.
func LastSeq(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	s, err := EnsureStream(ctx, js)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events: stream info: %w", err)
	}
	return info.State.LastSeq, nil
}

// LastJobSeq returns the sequence of the newest event on the subject of
// job jobID (of tenant, contracts.EventSubject), 0 when the stream holds
// none. The subject is shared by some of the tenant's jobs and by no
// other tenant's, so, unlike LastSeq, the answer says nothing of other
// tenants' events: it is what an event id given to the tenant may carry.
func LastJobSeq(ctx context.Context, js jetstream.JetStream, tenant, jobID string) (uint64, error) {
	s, err := EnsureStream(ctx, js)
	if err != nil {
		return 0, err
	}
	msg, err := s.GetLastMsgForSubject(ctx, contracts.EventSubject(tenant, jobID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("events: last event of job %s: %w", jobID, err)
	}
	return msg.Sequence, nil
}

// maxScan bounds the stream reads of one JobEventAfter: past it the
// answer is "yes", which costs the caller one more snapshot, never a
// missed event.
const maxScan = 256

// JobEventAfter reports whether the stream holds an event of job jobID
// (of tenant) after sequence after: whether a reader that saw every event
// up to after has something left to see. It reads the job's subject
// forward from after, one stored message at a time, so it costs as many
// reads as the subject has events past after (at most maxScan, then it
// answers true). A sequence past the stream's end (the stream was
// recreated) has nothing after it.
func JobEventAfter(ctx context.Context, js jetstream.JetStream, tenant, jobID string, after uint64) (bool, error) {
	s, err := EnsureStream(ctx, js)
	if err != nil {
		return false, err
	}
	subject := contracts.EventSubject(tenant, jobID)
	seq := after + 1
	for range maxScan {
		msg, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("events of job %s after %d: %w", jobID, after, err)
		}
		if ev, err := contracts.DecodeEvent(msg.Data); err == nil && ev.JobID == jobID {
			return true, nil
		}
		seq = msg.Sequence + 1
	}
	return true, nil
}
