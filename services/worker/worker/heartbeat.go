package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/worker/internal/lease"
)

// maxHeartbeatTimeout bounds one periodic heartbeat request.
const maxHeartbeatTimeout = 2 * time.Second

// heartbeatLoop renews the held leases every heartbeat interval and fences
// handlers whose leases went unacknowledged for too long.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.heartbeatTick(ctx)
	}
}

// fenceAfter is how long a lease may go unacknowledged before its handler
// is cancelled: two thirds of the stale threshold, so the handler stops
// before the reaper can requeue the job elsewhere.
func (w *Worker) fenceAfter() time.Duration { return w.cfg.StaleThreshold * 2 / 3 }

// fenceIfExpired fences the attempt when its lease has gone unacknowledged
// for longer than fenceAfter, as the next heartbeat tick would. The tick
// alone leaves a window: a process paused past its lease (SIGSTOP, a
// frozen VM, a long stall) resumes with its timers all due at once, and the
// job goroutine may start the handler on a start heartbeat acknowledged
// before the pause, or report the result of a handler that returned right
// after it, before the heartbeat goroutine fences the lease. So the job
// goroutine checks too, before the handler starts and after it returns.
func (w *Worker) fenceIfExpired(t *task) {
	if w.leases.FenceIfUnacknowledged(t.lease, w.now(), w.fenceAfter()) {
		w.m.fenced.WithLabelValues(fenceUnacknowledged).Inc()
		t.log.Warn().Dur("unacknowledged_for", w.fenceAfter()).Msg("lease expired; fencing the attempt")
	}
}

// heartbeatTick is one round: self-fence, then renew the rest.
func (w *Worker) heartbeatTick(ctx context.Context) {
	now := w.now()
	for _, l := range w.leases.Unacknowledged(now, w.fenceAfter()) {
		if w.leases.Fence(l, lease.ErrUnacknowledged) {
			w.m.fenced.WithLabelValues(fenceUnacknowledged).Inc()
			w.log.Warn().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).
				Dur("unacknowledged_for", w.fenceAfter()).Msg("lease not acknowledged in time; cancelling the handler")
		}
	}
	active := w.leases.Active()
	timeout := min(maxHeartbeatTimeout, w.cfg.HeartbeatInterval)
	for len(active) > 0 {
		batch := active[:min(len(active), contracts.MaxLeasesPerHeartbeat)]
		active = active[len(batch):]
		ack, err := w.requestHeartbeat(ctx, batch, timeout)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Int("leases", len(batch)).Str(observe.FieldSubject, contracts.HeartbeatSubject(w.cfg.WorkerID)).
					Msg("heartbeat not acknowledged")
			}
			continue
		}
		w.applyAck(batch, ack, now)
	}
}

// requestHeartbeat sends one heartbeat for leases and decodes the ack.
func (w *Worker) requestHeartbeat(ctx context.Context, leases []contracts.Lease, timeout time.Duration) (contracts.HeartbeatAck, error) {
	ack, err := w.doHeartbeat(ctx, leases, timeout)
	outcome := heartbeatAcked
	if err != nil {
		outcome = heartbeatFailed
	}
	w.m.heartbeats.WithLabelValues(outcome).Inc()
	return ack, err
}

func (w *Worker) doHeartbeat(ctx context.Context, leases []contracts.Lease, timeout time.Duration) (contracts.HeartbeatAck, error) {
	data, err := json.Marshal(contracts.Heartbeat{WorkerID: w.cfg.WorkerID, Leases: leases})
	if err != nil {
		return contracts.HeartbeatAck{}, fmt.Errorf("heartbeat: encode: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := w.nc.RequestWithContext(rctx, contracts.HeartbeatSubject(w.cfg.WorkerID), data)
	if err != nil {
		return contracts.HeartbeatAck{}, fmt.Errorf("heartbeat: %w", err)
	}
	ack, err := contracts.DecodeHeartbeatAck(msg.Data)
	if err != nil {
		return contracts.HeartbeatAck{}, fmt.Errorf("heartbeat ack: %w", err)
	}
	if ack.Error != "" {
		// Not recorded (the store did not answer, say): no renewal, so a
		// worker cut off from the store stops before its job goes stale.
		return contracts.HeartbeatAck{}, fmt.Errorf("heartbeat refused: %s", ack.Error)
	}
	return ack, nil
}

// applyAck fences the leases the scheduler reports lost, cancels those a
// user asked to cancel, and renews the rest of sent, which went out at
// sentAt.
func (w *Worker) applyAck(sent []contracts.Lease, ack contracts.HeartbeatAck, sentAt time.Time) {
	lost := make(map[contracts.Lease]bool, len(ack.Lost))
	for _, l := range ack.Lost {
		lost[l] = true
		if w.leases.Fence(l, lease.ErrLost) {
			w.m.fenced.WithLabelValues(fenceLost).Inc()
			w.log.Warn().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).
				Msg("lease lost; cancelling the handler")
		}
	}
	for _, l := range ack.Cancel {
		if w.leases.Cancel(l) {
			w.log.Info().Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).
				Msg("job cancel requested")
		}
	}
	renewed := make([]contracts.Lease, 0, len(sent))
	for _, l := range sent {
		if !lost[l] {
			renewed = append(renewed, l)
		}
	}
	w.leases.Acked(renewed, sentAt)
}
