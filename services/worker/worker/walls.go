package worker

import (
	"slices"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
)

// The walls around exec runs. The worker makes itself not dumpable (its
// memory, environment and descriptors closed to its runs even under one
// uid), holds each run to its resources (limit) and walls its programs
// off (sandbox: a uid of their own, a private namespace, a warden that
// kills them when their lease passes even while the worker is stopped).
// What the host allows is logged at start and announced (/v1/stats); with
// SLUICE_WORKER_EXEC_REQUIRE_ISOLATION a worker that cannot give runs a
// uid of their own does not take the exec kind at all.

// openWalls sets the walls up when the exec kind is registered and
// returns what tears them down (after the last run).
func (w *Worker) openWalls() func() {
	if err := sandbox.Harden(); err != nil {
		w.log.Warn().Err(err).Msg("the worker stays dumpable: a run of its own uid could read its memory")
	}
	if !slices.Contains(w.Kinds(), kinds.Exec) {
		return func() {}
	}
	w.limits = limit.New(limit.Options{Name: w.cfg.WorkerID, Want: contracts.LimitMechanism(w.cfg.Limits), Pids: w.cfg.MaxRunPids})
	ev := w.log.Info().Str("mechanism", string(w.limits.Mechanism()))
	if why := w.limits.Reason(); why != "" {
		ev = ev.Str("why", why)
	}
	ev.Msg("exec jobs held to their resources")

	uids, _ := sandbox.ParseRange(w.cfg.RunUIDs) // checked by Validate
	w.sandbox = sandbox.New(sandbox.Options{
		UIDs: uids, Pids: w.cfg.MaxRunPids, Reach: []string{w.cfg.ScratchDir}, Shared: w.cfg.ExecDirs,
		Want: contracts.Isolation(w.cfg.Isolation),
		OnExpired: func(run string) {
			w.m.fenced.WithLabelValues(fenceWarden).Inc()
			w.log.Warn().Str("run", run).Msg("a run's lease passed unrenewed: the warden killed its programs")
		},
	})
	iso := w.sandbox.Isolation()
	if iso == contracts.IsolationUID {
		// No namespace binds a run's directories: runs reach them by
		// their real paths, through the worker's folder.
		if err := w.scratch.share(); err != nil {
			w.log.Warn().Err(err).Msg("scratch folder not opened to the runs' uids")
		}
	}
	ev = w.log.Info().Str("isolation", string(iso))
	if iso != contracts.IsolationNamespace {
		ev = w.log.Warn().Str("isolation", string(iso)).Str("why", w.sandbox.Reason())
	}
	ev.Msg("exec runs walled off")
	w.isolation = iso
	if w.cfg.ExecRequireIsolation && !iso.OwnIdentity() {
		w.mu.Lock()
		delete(w.handlers, kinds.Exec)
		w.mu.Unlock()
		w.isolation = ""
		w.log.Error().Str("kind", kinds.Exec).Str("why", w.sandbox.Reason()).
			Msg("the exec kind is off: SLUICE_WORKER_EXEC_REQUIRE_ISOLATION is set and runs cannot get a uid of their own here")
	}
	return func() {
		if err := w.sandbox.Close(); err != nil {
			w.log.Warn().Err(err).Msg("run warden not stopped cleanly")
		}
		if err := w.limits.Close(); err != nil {
			w.log.Warn().Err(err).Msg("the worker's cgroups not removed")
		}
	}
}
