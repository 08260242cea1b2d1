package contracts

import (
	"fmt"
	"math"
	"slices"
)

// LimitMechanism names how a worker held a run to its declared resources.
type LimitMechanism string

// The mechanisms, from the strongest: a cgroup of the run's own (v2, or
// the v1 memory and cpu controllers), resource limits of its process
// (setrlimit: address space, CPU seconds), or nothing enforced.
const (
	LimitCgroupV2 LimitMechanism = "cgroup-v2"
	LimitCgroupV1 LimitMechanism = "cgroup-v1"
	LimitRlimit   LimitMechanism = "rlimit"
	LimitNone     LimitMechanism = "none"
)

// LimitMechanisms lists every mechanism.
var LimitMechanisms = []LimitMechanism{LimitCgroupV2, LimitCgroupV1, LimitRlimit, LimitNone}

// Valid reports whether m is one of LimitMechanisms.
func (m LimitMechanism) Valid() bool { return slices.Contains(LimitMechanisms, m) }

// Usage is what one run used, as its worker measured it: the mechanism
// that held it to its declaration, its peak memory in bytes and the CPU
// time it took in seconds (its whole process tree where the mechanism
// sees it).
type Usage struct {
	Mechanism  LimitMechanism `json:"mechanism"`
	PeakMemory int64          `json:"peak_memory"`
	CPUSeconds float64        `json:"cpu_seconds"`
}

// Check reports what is wrong with a usage report, or nil.
func (u Usage) Check() error {
	switch {
	case !u.Mechanism.Valid():
		return fmt.Errorf("usage: unknown mechanism %q", u.Mechanism)
	case u.PeakMemory < 0:
		return fmt.Errorf("usage: peak_memory %d is negative", u.PeakMemory)
	case u.CPUSeconds < 0 || math.IsNaN(u.CPUSeconds) || math.IsInf(u.CPUSeconds, 0):
		return fmt.Errorf("usage: cpu_seconds %g is not a non-negative number", u.CPUSeconds)
	}
	return nil
}
