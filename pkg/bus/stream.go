package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// StreamConfig is the job stream: a file-backed work queue, so a message is
// removed once its consumer acknowledges it. The store is the truth; losing
// this stream loses no job (the schedulers claim pending jobs from the
// store, and the reaper requeues running jobs whose worker went quiet).
func StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        contracts.StreamName,
		Description: "Sluice job messages: due, requeue, result",
		Subjects:    []string{contracts.StreamSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
		Replicas:    1,
	}
}

// ConsumerConfig is the durable pull consumer named name reading
// subjects (FilterSubject for one, FilterSubjects for more; see
// contracts.ConsumerSubjects). It never gives up on a message (MaxDeliver
// -1: a nak is a delivery, and overflow naks a due message many times) and
// allows any number of outstanding messages, because a job waiting for
// capacity stays outstanding until its delayed redelivery.
func ConsumerConfig(name string, ackWait time.Duration, subjects ...string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if len(subjects) == 1 {
		cfg.FilterSubject = subjects[0]
	} else {
		cfg.FilterSubjects = slices.Clone(subjects)
	}
	return cfg
}

// Filters are the subjects cfg reads: its FilterSubject, or its
// FilterSubjects, sorted.
func Filters(cfg jetstream.ConsumerConfig) []string {
	if cfg.FilterSubject != "" {
		return []string{cfg.FilterSubject}
	}
	return slices.Sorted(slices.Values(cfg.FilterSubjects))
}

// EnsureStream returns the job stream, creating it when it is missing. An
// existing stream is left as it is: every service calls this at start and
// after losing the stream, and updating a live stream's config while
// another service creates its consumers races inside nats-server.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	return EnsureStreamConfig(ctx, js, StreamConfig())
}

// createRaceTries and createRaceWait bound the look-ups after a failed
// create (see EnsureStreamConfig).
const (
	createRaceTries = 20
	createRaceWait  = 50 * time.Millisecond
)

// EnsureStreamConfig returns the stream cfg names, creating it with cfg
// when it is missing and leaving an existing one as it is. Several services
// may create the same stream at the same moment: nats-server then answers
// all but one with "already in use" or, in a narrower window, with an
// error creating the stream's store. The same store error comes back for a
// moment after an overlapping stream was deleted, while the server still
// finishes the deletion. Either way the stream is looked up, and created
// again, for up to a second before the error is returned.
//
// The stream gets the replicas of js (WithReplicas) when cfg asks fewer.
func EnsureStreamConfig(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = max(cfg.Replicas, Replicas(js))
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	s, err = js.CreateStream(ctx, cfg)
	if err == nil {
		return s, nil
	}
	for range createRaceTries {
		if s, lerr := js.Stream(ctx, cfg.Name); lerr == nil {
			return s, nil // another service was first
		}
		if s, cerr := js.CreateStream(ctx, cfg); cerr == nil {
			return s, nil // the server has finished deleting what was in the way
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		case <-time.After(createRaceWait):
		}
	}
	return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
}

// EnsureConsumer creates the stream if needed and then the durable
// consumer. An existing consumer is left as it is, unless it reads other
// subjects than cfg (one declared by an earlier release, before the
// per-worker report subjects): it is then updated to cfg, which moves its
// filter without losing its place or the messages it holds.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if _, err := EnsureStream(ctx, js); err != nil {
		return nil, err
	}
	c, err := js.Consumer(ctx, contracts.StreamName, cfg.Durable)
	if err == nil && slices.Equal(Filters(c.CachedInfo().Config), Filters(cfg)) {
		return c, nil
	}
	c, err = js.CreateOrUpdateConsumer(ctx, contracts.StreamName, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", cfg.Durable, err)
	}
	return c, nil
}

// Publish sends v as JSON to a stream subject and waits for JetStream's
// acknowledgement. When the stream is missing (deleted, or a wiped server)
// it recreates it once and tries again. msgID, when set, lets JetStream
// drop duplicates within its window; correctness never depends on it.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, v any, msgID string) error {
	return PublishMessage(ctx, js, Message{Subject: subject, Value: v, ID: msgID})
}

// PublishMessage is Publish of one Message (whose Data may be encoded
// already).
func PublishMessage(ctx context.Context, js jetstream.JetStream, m Message) error {
	subject := m.Subject
	msg, opts, err := m.encode()
	if err != nil {
		return err
	}
	_, err = js.PublishMsg(ctx, msg, opts...)
	if err == nil {
		return nil
	}
	if isNoStream(err) {
		if _, serr := EnsureStream(ctx, js); serr != nil {
			return fmt.Errorf("publish %s: %w (and %w)", subject, err, serr)
		}
		if _, err = js.PublishMsg(ctx, msg, opts...); err == nil {
			return nil
		}
	}
	return fmt.Errorf("publish %s: %w", subject, err)
}

func isNoStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// Message is one message to publish: its subject, the value to encode as
// JSON (or Data, the JSON already encoded), and its Nats-Msg-Id ("" =
// none).
type Message struct {
	Subject string
	Value   any
	// Data, when not nil, is sent as it is and Value is ignored.
	Data []byte
	ID   string
}

// encode is m as a NATS message and its publish options.
func (m Message) encode() (*nats.Msg, []jetstream.PublishOpt, error) {
	data := m.Data
	if data == nil {
		var err error
		if data, err = json.Marshal(m.Value); err != nil {
			return nil, nil, fmt.Errorf("publish %s: encode: %w", m.Subject, err)
		}
	}
	var opts []jetstream.PublishOpt
	if m.ID != "" {
		opts = append(opts, jetstream.WithMsgID(m.ID))
	}
	return &nats.Msg{Subject: m.Subject, Data: data, Header: nats.Header{}}, opts, nil
}

// PublishAll publishes msgs to JetStream with all of them in flight at
// once and waits for every acknowledgement (or ctx). It returns one error
// per message, nil where JetStream stored it. A missing stream is created
// once and the messages it refused are sent again.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []Message) []error {
	errs := make([]error, len(msgs))
	todo := make([]int, len(msgs))
	for i := range msgs {
		todo[i] = i
	}
	for round := 0; round < 2 && len(todo) > 0; round++ {
		futures := make(map[int]jetstream.PubAckFuture, len(todo))
		for _, i := range todo {
			msg, opts, err := msgs[i].encode()
			if err != nil {
				errs[i] = err
				continue
			}
			f, err := js.PublishMsgAsync(msg, opts...)
			if err != nil {
				errs[i] = fmt.Errorf("publish %s: %w", msg.Subject, err)
				continue
			}
			futures[i] = f
		}
		var again []int
		noStream := false
		for _, i := range todo {
			f, ok := futures[i]
			if !ok {
				continue
			}
			select {
			case <-f.Ok():
				errs[i] = nil
			case err := <-f.Err():
				errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
				if isNoStream(err) {
					noStream = true
					again = append(again, i)
				}
			case <-ctx.Done():
				errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, ctx.Err())
			}
		}
		if !noStream {
			break
		}
		if _, err := EnsureStream(ctx, js); err != nil {
			break
		}
		todo = again
	}
	return errs
}
