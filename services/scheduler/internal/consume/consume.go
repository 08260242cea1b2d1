// Package consume runs a durable JetStream pull consumer with bounded
// concurrency and keeps it running: when the consumer or its stream
// disappears (deleted, a wiped server) it is declared again with backoff.
// Handlers return a Settle instead of touching the message, which keeps
// them testable without JetStream.
package consume

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
)

// Settle says how to finish a message.
type Settle struct {
	// Term drops a message that can never be processed (malformed).
	Term bool
	// Retry redelivers the message after Delay; otherwise it is acknowledged.
	Retry bool
	Delay time.Duration
}

// Ack acknowledges the message.
func Ack() Settle { return Settle{} }

// RetryIn redelivers the message after d.
func RetryIn(d time.Duration) Settle {
	if d < 0 {
		d = 0
	}
	return Settle{Retry: true, Delay: d}
}

// Poison terminates a message that can never be processed.
func Poison() Settle { return Settle{Term: true} }

// Handler processes one message: its subject (which names the worker that
// sent it, for the per-worker report subjects) and its data. progress tells
// JetStream the message is still being worked on (resets its ack timer).
type Handler func(ctx context.Context, subject string, data []byte, progress func()) Settle

// Options configure a consumer loop.
type Options struct {
	Config      jetstream.ConsumerConfig
	Concurrency int
	// DrainTimeout is how long handlers in flight when ctx ends may still
	// run (their context ends then); 0 cancels them with ctx.
	DrainTimeout time.Duration
	Log          zerolog.Logger
}

// Run consumes until ctx ends, running at most Concurrency handlers at
// once, then stops fetching and waits for running handlers to finish,
// cancelling their context DrainTimeout after ctx ended.
func Run(ctx context.Context, js jetstream.JetStream, o Options, h Handler) error {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	log := o.Log.With().Str("consumer", o.Config.Durable).Str(observe.FieldSubject, strings.Join(bus.Filters(o.Config), " ")).Logger()
	sem := make(chan struct{}, o.Concurrency)
	hctx, cancelHandlers := observe.DrainContext(ctx, o.DrainTimeout)
	defer cancelHandlers()
	var wg sync.WaitGroup
	defer wg.Wait()
	handle := func(m jetstream.Msg) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return // not acknowledged: redelivered after AckWait
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := h(hctx, m.Subject(), m.Data(), func() { _ = m.InProgress() })
			var err error
			switch {
			case s.Term:
				err = m.Term()
			case s.Retry:
				err = m.NakWithDelay(s.Delay)
			default:
				err = m.Ack()
			}
			if err != nil && hctx.Err() == nil {
				log.Debug().Err(err).Msg("settle message")
			}
		}()
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for ctx.Err() == nil {
		cons, err := bus.EnsureConsumer(ctx, js, o.Config)
		if err != nil {
			wait := b.NextBackOff()
			log.Warn().Err(err).Dur("retry_in", wait).Msg("consumer unavailable")
			sleep(ctx, wait)
			continue
		}
		b.Reset()
		restart := make(chan struct{}, 1)
		cc, err := cons.Consume(handle,
			jetstream.PullMaxMessages(2*o.Concurrency),
			jetstream.PullHeartbeat(2*time.Second),
			jetstream.PullExpiry(10*time.Second),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
					errors.Is(err, jetstream.ErrConsumerNotFound) {
					select {
					case restart <- struct{}{}:
					default:
					}
				}
			}))
		if err != nil {
			log.Warn().Err(err).Msg("consume failed")
			sleep(ctx, b.NextBackOff())
			continue
		}
		select {
		case <-ctx.Done():
		case <-restart:
			log.Warn().Dur("retry_in", lostConsumerDelay).Msg("consumer lost; declaring it again")
		}
		cc.Stop()
		<-cc.Closed()
		// The server tells pulls their consumer is gone before it has
		// finished deleting the stream; looking the stream up again at once
		// can leave it half deleted (publishes to it then time out).
		sleep(ctx, lostConsumerDelay)
	}
	return nil
}

// lostConsumerDelay is the pause before a lost consumer is declared again.
const lostConsumerDelay = time.Second

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
