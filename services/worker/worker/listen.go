package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// flushTimeout bounds the wait for the server to confirm subscriptions and
// the last announcement.
const flushTimeout = 2 * time.Second

// subscribe listens for offers, cancel requests and discovery requests.
// Handlers started by offers run under hardCtx and deliver under deliverCtx.
func (w *Worker) subscribe(hardCtx, deliverCtx context.Context) ([]*nats.Subscription, error) {
	routes := []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{contracts.WorkerOfferSubject(w.cfg.WorkerID), func(m *nats.Msg) { w.handleOffer(hardCtx, deliverCtx, m) }},
		{contracts.WorkerCancelSubject(w.cfg.WorkerID), w.handleCancel},
		{contracts.SubjectDiscover, func(*nats.Msg) { w.signalAnnounce() }},
	}
	subs := make([]*nats.Subscription, 0, len(routes))
	for _, r := range routes {
		s, err := w.nc.Subscribe(r.subject, r.handle)
		if err != nil {
			w.unsubscribe(subs)
			return nil, fmt.Errorf("worker: subscribe %s: %w", r.subject, err)
		}
		subs = append(subs, s)
	}
	// Make sure the server has the subscriptions before anyone hears of us.
	if err := w.nc.FlushTimeout(flushTimeout); err != nil {
		w.log.Warn().Err(err).Msg("nats flush after subscribing failed; offers may be missed until reconnected")
	}
	return subs, nil
}

// unsubscribe stops listening and flushes what is still buffered (the
// leaving announcement).
func (w *Worker) unsubscribe(subs []*nats.Subscription) {
	for _, s := range subs {
		if err := s.Unsubscribe(); err != nil {
			w.log.Debug().Err(err).Str(observe.FieldSubject, s.Subject).Msg("unsubscribe failed")
		}
	}
	if err := w.nc.FlushTimeout(flushTimeout); err != nil {
		w.log.Debug().Err(err).Msg("nats flush on stop failed")
	}
}

// handleCancel stops the handler of the attempt named by a CancelJob.
func (w *Worker) handleCancel(m *nats.Msg) {
	c, err := contracts.DecodeCancelJob(m.Data)
	if err != nil {
		w.log.Warn().Err(err).Str(observe.FieldSubject, m.Subject).Msg("malformed cancel request ignored")
		return
	}
	l := contracts.Lease{JobID: c.JobID, Claim: c.Claim}
	if w.leases.Cancel(l) {
		w.log.Info().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).
			Str(observe.FieldSubject, m.Subject).Msg("job cancel requested")
	}
}
