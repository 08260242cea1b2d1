package apply

import (
	"context"
	"encoding/json"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Heartbeat renews the leases of the worker subject names and returns the
// encoded answer. The heartbeat must name that worker too (Reporter), else
// it is refused whole and answered with an error: nothing is renewed. A
// lease counts as held only when the store has its job running at its
// claim on that worker (store.DecideLease), so a lease of another
// worker's job is answered lost and renews nothing. A
// claim wrote the job running with its lease already, so a held lease is
// written only once its stored heartbeat is LeaseRenewAfter old, and kept
// from a read before; a job given back to pending at the same claim (its
// offer's answer was lost, the worker had taken it) is recorded running
// again; leases the worker no longer holds come back as lost so it stops
// that work.
func (a *Applier) Heartbeat(ctx context.Context, subject string, data []byte) []byte {
	hb, err := contracts.DecodeHeartbeat(data)
	if err != nil {
		return encodeAck(contracts.HeartbeatAck{Error: "malformed heartbeat: " + err.Error()})
	}
	if _, v := Reporter(subject, hb.WorkerID); v != VerdictApplies {
		a.refuse(metrics.ReportHeartbeat, v, refusal{subject: subject, named: hb.WorkerID})
		return encodeAck(contracts.HeartbeatAck{Error: "heartbeat refused: subject " + subject + " is not worker " + hb.WorkerID + "'s"})
	}
	out, err := a.jobs.Heartbeat(ctx, hb.WorkerID, hb.Leases, a.now(), a.cfg.LeaseRenewAfter)
	if err != nil {
		a.log.Warn().Err(err).Str(observe.FieldWorkerID, hb.WorkerID).Msg("heartbeat not applied")
		return encodeAck(contracts.HeartbeatAck{Error: "store unavailable"})
	}
	a.m.Heartbeats.WithLabelValues(metrics.HeartbeatRenewed).Add(float64(len(out.Renewed)))
	a.m.Heartbeats.WithLabelValues(metrics.HeartbeatKept).Add(float64(len(out.Kept)))
	a.m.Heartbeats.WithLabelValues(metrics.HeartbeatPromoted).Add(float64(len(out.Promoted)))
	a.m.Heartbeats.WithLabelValues(metrics.HeartbeatLost).Add(float64(len(out.Lost)))
	a.m.Started(out.Started) // queue wait: submit → running
	for _, j := range out.Started {
		a.ev.State(j)
	}
	for _, l := range out.Lost {
		// Progress kept of a lost claim is never written.
		if a.book.forget(l.JobID, l.Claim) != 0 {
			a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
		}
		a.log.Info().Str(observe.FieldWorkerID, hb.WorkerID).Str(observe.FieldJobID, l.JobID).Int64(observe.FieldClaim, l.Claim).Msg("lease lost; worker told to stop")
	}
	return encodeAck(contracts.HeartbeatAck{Lost: out.Lost, Cancel: out.Cancel})
}

func encodeAck(ack contracts.HeartbeatAck) []byte {
	b, err := json.Marshal(ack)
	if err != nil {
		return []byte(`{"error":"encode"}`)
	}
	return b
}
