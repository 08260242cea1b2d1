// Package sandbox puts walls around the programs of an exec run, so that
// a run cannot read or change its worker, other runs or its own limits,
// and never outlives its lease.
//
// Three pieces, each a mode of the worker's own binary (re-executed
// through /proc/self/exe; the init function of this package dispatches on
// argv[0], so every binary that embeds a worker has them):
//
//   - the identity: each run gets a uid and gid of its own from a range
//     the operator sets (SLUICE_WORKER_RUN_UIDS), held host-wide by a lock
//     file per uid, with no supplementary groups, so nothing the worker
//     owns (its memory, environment, store, data directory, cgroups) is
//     open to it and runs cannot reach each other;
//   - the launcher ("sluice-run-enter"): started by the worker in the run's
//     cgroups (and, where the worker may, in a mount and IPC namespace of
//     its own), it mounts a private /tmp, /var/tmp and /dev/shm, binds the
//     run's scratch and input directories at fixed paths, mounts a /proc
//     that shows only the run's own processes, applies the run's rlimits,
//     drops to the run's identity with no_new_privs, and execs the
//     program. It waits for the worker's go-ahead first, so no program runs
//     before the warden knows of it;
//   - the warden ("sluice-run-warden"): one process per worker, outside
//     every run's cgroup, to which the worker hands each run's lease
//     deadline, cgroups, uid and process group. It kills a run's whole tree
//     when the lease passes without renewal, whether or not the worker is
//     scheduled (a frozen or cut-off worker), and every run it knows when
//     the worker dies.
//
// Where the host allows less (no privilege to switch users or to make
// mount namespaces), New says so (Isolation, Reason) and runs keep the
// worker's uid; the warden still bounds every run by its lease.
package sandbox
