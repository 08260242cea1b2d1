package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// announceLoop announces the worker at once, every heartbeat interval and
// whenever signalled (in-flight or draining changed, or a discover request).
func (w *Worker) announceLoop(ctx context.Context) {
	w.announce(false)
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.announceSig:
		}
		w.announce(false)
	}
}

// signalAnnounce asks for an announcement without blocking. Signals sent
// before the loop reads the state coalesce; one sent after it is kept, so
// the last state is always announced.
func (w *Worker) signalAnnounce() {
	select {
	case w.announceSig <- struct{}{}:
	default:
	}
}

// load reads the slots in use with the sequence number that orders this
// reading against the worker's other load reports (contracts.Announce.Seq):
// the start's wall clock plus the acquires and releases since. A restart
// begins past every number the previous process could have reached (it
// would need more than one slot change per nanosecond).
func (w *Worker) load() (inFlight int, seq uint64) {
	n, changes := w.slots.Load()
	return n, w.seqBase + changes
}

// announce publishes the worker's current state.
func (w *Worker) announce(leaving bool) {
	w.mu.Lock()
	draining := w.draining
	capacity, free := w.ledger.capacity, w.ledger.free().Clamp()
	inFlight, seq := w.load()
	w.mu.Unlock()
	a := contracts.Announce{
		WorkerID:   w.cfg.WorkerID,
		Kinds:      w.Kinds(),
		Capacity:   w.slots.Capacity(),
		InFlight:   inFlight,
		Seq:        seq,
		Draining:   draining || leaving,
		Leaving:    leaving,
		IntervalMS: w.cfg.HeartbeatInterval.Milliseconds(),
		Spawned:    w.cfg.Spawned,
		Version:    w.cfg.Version,

		Resources:     &capacity,
		FreeResources: &free,
		KindResources: w.ledger.kinds,
		Isolation:     w.isolation,
	}
	data, err := json.Marshal(a)
	if err == nil {
		err = w.nc.Publish(contracts.AnnounceSubject(w.cfg.WorkerID), data)
	}
	if err != nil {
		w.log.Warn().Err(err).Str(observe.FieldSubject, contracts.AnnounceSubject(w.cfg.WorkerID)).Msg("announce failed")
	}
}
