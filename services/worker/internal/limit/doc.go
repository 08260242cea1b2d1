// Package limit holds an exec job's process tree to the resources it
// declared, and measures what it used.
//
// Mechanisms, the strongest the host allows first:
//
//   - cgroup-v2: a child cgroup per run under the worker's own cgroup
//     (memory.max, memory.swap.max = 0, cpu.max), the process created
//     inside it (clone into the cgroup: SysProcAttr.UseCgroupFD), the tree
//     killed with cgroup.kill;
//   - cgroup-v1: a child cgroup per run in the memory and cpu hierarchies
//     (and cpuacct when mounted apart) under the worker's own ones
//     (memory.limit_in_bytes and memsw, cpu.cfs_quota_us). The thread that
//     starts the process is moved into the run's cgroups just for the
//     fork, so the process is inside them before it runs its first
//     instruction (no re-exec of the worker, no window in which the
//     program runs unlimited), and moved back; the tree is killed by
//     signalling every process the cgroups list until none is left;
//   - rlimit: when no cgroup can be made, the run's process gets
//     RLIMIT_AS (its memory) and, when its max runtime is known,
//     RLIMIT_CPU (cores × max runtime) right after it starts (prlimit);
//     its process group is what a cancel kills;
//   - none: the declaration is only counted, not enforced (not Linux).
//
// A run that went past its memory is reported (Outcome.OverMemory) so
// the job fails with the resources: class; the worker itself is never
// charged for it.
package limit
