package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/worker/internal/lease"
)

// task is one accepted attempt and what its goroutine needs.
type task struct {
	job     Job
	lease   contracts.Lease
	handler Handler
	cancel  context.CancelCauseFunc
	log     zerolog.Logger
	release sync.Once
}

// handleOffer answers an Offer at once, and only then starts the job it
// accepted.
func (w *Worker) handleOffer(hardCtx, deliverCtx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		w.log.Warn().Str(observe.FieldSubject, m.Subject).Msg("offer without a reply subject ignored")
		return
	}
	reply, jctx, t := w.admit(hardCtx, m.Data)
	w.m.offers.WithLabelValues(string(reply.Status)).Inc()
	data, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		// The start heartbeat still records an accepted job as running.
		w.log.Warn().Err(err).Str(observe.FieldSubject, m.Subject).Msg("offer reply failed")
	}
	if t == nil {
		return
	}
	t.log.Debug().Str(observe.FieldSubject, m.Subject).Msg("offer accepted")
	w.signalAnnounce()
	go w.runJob(jctx, deliverCtx, t)
}

// admit decides an offer. When it accepts a new attempt it has taken a
// slot, recorded the lease and counted the goroutine the caller must
// start, and returns the attempt's context and task.
func (w *Worker) admit(hardCtx context.Context, data []byte) (contracts.OfferReply, context.Context, *task) {
	offer, err := contracts.DecodeOffer(data)
	if err != nil {
		return w.reply(contracts.OfferRefused, "malformed offer: "+err.Error()), nil, nil
	}
	spec := offer.Job
	l := contracts.Lease{JobID: spec.ID, Attempt: spec.Attempt}

	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.leases.Lookup(l) {
	case lease.Held:
		// A repeated offer of an attempt already here: accept again, start nothing.
		return w.reply(contracts.OfferAccepted, "already running here"), nil, nil
	case lease.Conflict:
		return w.reply(contracts.OfferRefused, "another attempt of this job runs here"), nil, nil
	}
	h, ok := w.handlers[spec.Kind]
	if !ok {
		return w.reply(contracts.OfferRefused, fmt.Sprintf("kind %q is not handled here", spec.Kind)), nil, nil
	}
	if w.draining {
		return w.reply(contracts.OfferRefused, "draining"), nil, nil
	}
	if !w.slots.TryAcquire() {
		return w.reply(contracts.OfferBusy, ""), nil, nil
	}
	jctx, cancel := context.WithCancelCause(hardCtx)
	w.leases.Add(l, cancel, w.now())
	w.active++
	w.jobs.Add(1)
	w.idleSince = time.Time{} // busy
	w.broadcastLocked()
	w.m.slotsUsed.Set(float64(w.slots.InFlight()))
	t := &task{
		job:     jobFromSpec(spec),
		lease:   l,
		handler: h,
		cancel:  cancel,
		log: w.log.With().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldAttempt, l.Attempt).
			Str("kind", spec.Kind).Logger(),
	}
	return w.reply(contracts.OfferAccepted, ""), jctx, t
}

// reply is an offer answer carrying the worker's load.
func (w *Worker) reply(status contracts.OfferStatus, reason string) contracts.OfferReply {
	return contracts.OfferReply{
		Status:   status,
		WorkerID: w.cfg.WorkerID,
		InFlight: w.slots.InFlight(),
		Capacity: w.slots.Capacity(),
		Reason:   reason,
	}
}
