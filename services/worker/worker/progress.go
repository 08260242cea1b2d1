package worker

import (
	"context"
	"encoding/json"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

// ReportProgress reports how far the handler whose ctx this is has come:
// percent within 0..100, a short stage and message. Reports are throttled
// per job (SLUICE_WORKER_PROGRESS_INTERVAL; the latest wins), fire and
// forget, and show up on the job (GET /v1/jobs/{id}) and as progress
// events. It never blocks; it fails only for a bad progress, a ctx that is
// not a handler's, or an attempt that already ended.
func ReportProgress(ctx context.Context, p contracts.Progress) error {
	return progress.Report(ctx, p)
}

// progressSender publishes one attempt's progress reports to the
// schedulers. A report that cannot be sent is counted and dropped: the
// next one replaces it.
func (w *Worker) progressSender(t *task) func(contracts.Progress) {
	return func(p contracts.Progress) {
		data, err := json.Marshal(contracts.ProgressReport{
			JobID: t.lease.JobID, Claim: t.lease.Claim, WorkerID: w.cfg.WorkerID, Progress: p,
		})
		if err == nil {
			err = w.nc.Publish(contracts.ProgressSubject(w.cfg.WorkerID), data)
		}
		if err != nil {
			w.m.progress.WithLabelValues("dropped").Inc()
			return
		}
		w.m.progress.WithLabelValues("sent").Inc()
	}
}
