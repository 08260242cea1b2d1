// Package worker runs Sluice jobs. A Worker announces itself on NATS,
// answers the scheduler's offers ("accepted" at once while it has a free
// slot, "busy" otherwise, never waiting), records each accepted attempt as
// running through an acknowledged start heartbeat before its handler runs,
// renews its leases with periodic heartbeats, fences itself when a lease is
// lost or goes unacknowledged, obeys cancel requests, and delivers every
// outcome durably through JetStream. It receives and reports only on
// subjects of its own worker id (contracts.WorkerOfferSubject,
// contracts.HeartbeatSubject, contracts.ResultSubject, …), so that its NATS
// user may be granted those alone (bus.WorkerPermissions): the schedulers
// take the reporting worker from the subject.
//
// Other Go services embed a worker by building a Config (LoadConfig reads
// the SLUICE_* environment, DefaultConfig gives the defaults), calling New
// with a NATS connection, registering their kinds with Handle and calling
// Run:
//
//	cfg := worker.DefaultConfig()
//	cfg.Kinds = nil // no built-in kinds
//	w, err := worker.New(cfg, worker.Deps{NC: nc, Log: log})
//	if err != nil { … }
//	_ = w.Handle("resize", func(ctx context.Context, job worker.Job) (worker.Result, error) {
//		…
//		return worker.JSON(map[string]int{"width": 640})
//	})
//	err = w.Run(ctx) // returns nil after ctx ends (drained), idle timeout or max lifetime
//
// The built-in kinds "sleep" and "exec" are registered when listed in
// Config.Kinds (both are by default).
package worker
