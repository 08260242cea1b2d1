package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
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
	// need is what the job takes of the worker's resources.
	need contracts.Resources
	// usage is what the run used, when its handler measured it.
	usage atomic.Pointer[contracts.Usage]
	// start is the batch its start heartbeat goes in (see claim).
	start   *startBatch
	cancel  context.CancelCauseFunc
	log     zerolog.Logger
	release sync.Once
}

// handleOffer answers an Offer or an OfferBatch at once, and only then
// starts the jobs it accepted.
func (w *Worker) handleOffer(hardCtx, deliverCtx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		w.log.Warn().Str(observe.FieldSubject, m.Subject).Msg("offer without a reply subject ignored")
		return
	}
	reply, started := w.admitOffer(hardCtx, m.Data)
	if len(reply.Results) == 0 {
		w.m.offers.WithLabelValues(string(reply.Status)).Inc()
	}
	for _, r := range reply.Results {
		w.m.offers.WithLabelValues(string(r.Status)).Inc()
	}
	data, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		// The start heartbeat still records an accepted job as running.
		w.log.Warn().Err(err).Str(observe.FieldSubject, m.Subject).Msg("offer reply failed")
	}
	if len(started) == 0 {
		return
	}
	w.signalAnnounce()
	leases := make([]contracts.Lease, len(started))
	for i, s := range started {
		leases[i] = s.t.lease
	}
	for i, b := range w.queueStarts(leases, w.cfg.ClaimWait) {
		started[i].t.start = b
	}
	for _, s := range started {
		s.t.log.Debug().Str(observe.FieldSubject, m.Subject).Msg("offer accepted")
		go w.runJob(s.ctx, deliverCtx, s.t)
	}
}

// startedTask is an accepted attempt whose goroutine the caller starts.
type startedTask struct {
	ctx context.Context
	t   *task
}

// admitOffer decides every job of an offer and returns the answer and the
// attempts to start.
func (w *Worker) admitOffer(hardCtx context.Context, data []byte) (contracts.OfferReply, []startedTask) {
	specs, batch, err := contracts.DecodeOffers(data)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		return w.reply(contracts.OfferRefused, "malformed offer: "+err.Error()), nil
	}
	if !batch {
		status, reason, jctx, t := w.admitLocked(hardCtx, specs[0])
		var started []startedTask
		if t != nil {
			started = append(started, startedTask{jctx, t})
		}
		return w.reply(status, reason), started
	}
	var (
		started []startedTask
		results = make([]contracts.OfferResult, len(specs))
		overall = contracts.OfferRefused
	)
	for i, spec := range specs {
		status, reason, jctx, t := w.admitLocked(hardCtx, spec)
		results[i] = contracts.OfferResult{JobID: spec.ID, Claim: spec.Claim, Status: status, Reason: reason}
		if t != nil {
			started = append(started, startedTask{jctx, t})
		}
		switch {
		case status == contracts.OfferAccepted:
			overall = contracts.OfferAccepted
		case status == contracts.OfferBusy && overall == contracts.OfferRefused:
			overall = contracts.OfferBusy
		}
	}
	r := w.reply(overall, "")
	r.Results = results
	return r, started
}

// admitLocked decides one offered job; w.mu is held. When it accepts a new
// attempt it has taken a slot, recorded the lease and counted the
// goroutine the caller must start, and returns the attempt's context and
// task.
func (w *Worker) admitLocked(hardCtx context.Context, spec contracts.JobSpec) (contracts.OfferStatus, string, context.Context, *task) {
	l := contracts.Lease{JobID: spec.ID, Claim: spec.Claim}
	switch w.leases.Lookup(l) {
	case lease.Held:
		// A repeated offer of an attempt already here: accept again, start nothing.
		return contracts.OfferAccepted, "already running here", nil, nil
	case lease.Conflict:
		return contracts.OfferRefused, "another attempt of this job runs here", nil, nil
	}
	h, ok := w.handlers[spec.Kind]
	if !ok {
		return contracts.OfferRefused, fmt.Sprintf("kind %q is not handled here", spec.Kind), nil, nil
	}
	if w.draining {
		return contracts.OfferRefused, "draining", nil, nil
	}
	need := w.ledger.need(spec)
	switch {
	case !need.Fits(w.ledger.capacity):
		return contracts.OfferRefused, "never fits here: " + describe(need, w.ledger.capacity), nil, nil
	case !need.Fits(w.ledger.free()):
		return contracts.OfferBusy, describe(need, w.ledger.free()), nil, nil
	case w.pressure != "":
		return contracts.OfferBusy, w.pressure, nil, nil
	}
	if !w.slots.TryAcquire() {
		return contracts.OfferBusy, "", nil, nil
	}
	w.ledger.take(need)
	w.setDeclaredLocked()
	jctx, cancel := context.WithCancelCause(hardCtx)
	w.leases.Add(l, cancel, w.now())
	w.active++
	w.jobs.Add(1)
	w.idleSince = time.Time{} // busy
	w.broadcastLocked()
	w.m.slotsUsed.Set(float64(w.slots.InFlight()))
	t := &task{
		job:     jobFromSpec(spec, need),
		lease:   l,
		handler: h,
		need:    need,
		cancel:  cancel,
		log: w.log.With().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).
			Str("kind", spec.Kind).Logger(),
	}
	return contracts.OfferAccepted, "", jctx, t
}

// reply is an offer answer carrying the worker's load; w.mu is held.
func (w *Worker) reply(status contracts.OfferStatus, reason string) contracts.OfferReply {
	inFlight, seq := w.load()
	capacity, free := w.ledger.capacity, w.ledger.free().Clamp()
	return contracts.OfferReply{
		Status:        status,
		WorkerID:      w.cfg.WorkerID,
		InFlight:      inFlight,
		Capacity:      w.slots.Capacity(),
		Reason:        reason,
		Resources:     &capacity,
		FreeResources: &free,
		Seq:           seq,
	}
}

// setDeclaredLocked updates the declared-resources gauges; w.mu is held.
func (w *Worker) setDeclaredLocked() {
	w.m.cpuDeclared.Set(w.ledger.used.CPU)
	w.m.memoryDeclared.Set(float64(w.ledger.used.Memory))
}
