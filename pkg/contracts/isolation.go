package contracts

import "slices"

// Isolation names the walls a worker puts around the programs of an exec
// run, strongest first. A worker announces it and /v1/stats shows it.
type Isolation string

// The isolations a worker can give a run.
const (
	// IsolationNamespace: each run has a uid and gid of its own (from
	// SLUICE_WORKER_RUN_UIDS), a private /tmp, /var/tmp and /dev/shm, and
	// a /proc that shows only its own processes; the worker is not
	// dumpable.
	IsolationNamespace Isolation = "uid+namespace"
	// IsolationUID: each run has a uid and gid of its own, but shares
	// /tmp and sees every process in /proc (the worker may switch users
	// but not make mount namespaces); the worker is not dumpable.
	IsolationUID Isolation = "uid"
	// IsolationNone: runs keep the worker's uid; only the worker being
	// not dumpable stands between them and its memory and environment.
	IsolationNone Isolation = "none"
)

// Isolations lists every isolation, strongest first.
var Isolations = []Isolation{IsolationNamespace, IsolationUID, IsolationNone}

// Valid reports whether i is one of Isolations.
func (i Isolation) Valid() bool { return slices.Contains(Isolations, i) }

// OwnIdentity reports whether runs get a uid of their own.
func (i Isolation) OwnIdentity() bool { return i == IsolationNamespace || i == IsolationUID }
