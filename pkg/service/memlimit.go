package service

import (
	"os"
	"runtime/debug"
)

// DefaultMemoryLimit is the soft memory limit of a service binary, in
// bytes, when the environment does not set GOMEMLIMIT: past it the Go
// runtime collects garbage sooner instead of letting the heap grow to
// twice what is live. It keeps a burst (such as eight batch admissions of
// 1,000 jobs at once in a gateway) from growing the process by the size
// of the burst again. It is soft: a process that needs more memory gets
// it, paying with more garbage collection; set GOMEMLIMIT (Go's own
// variable, e.g. GOMEMLIMIT=256MiB, or GOMEMLIMIT=off for none) to change it.
const DefaultMemoryLimit = 32 << 20

// memoryLimit is the soft memory limit a service binary sets in an
// environment read through lookup: DefaultMemoryLimit, or 0 (leave the
// runtime's own, read from GOMEMLIMIT) when GOMEMLIMIT is set at all.
func memoryLimit(lookup func(string) (string, bool)) int64 {
	if _, set := lookup("GOMEMLIMIT"); set {
		return 0
	}
	return DefaultMemoryLimit
}

// applyMemoryLimit sets the process's soft memory limit (see
// DefaultMemoryLimit) and returns it, 0 when GOMEMLIMIT decides.
func applyMemoryLimit() int64 {
	limit := memoryLimit(os.LookupEnv)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}
