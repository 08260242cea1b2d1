package contracts

import (
	"fmt"
	"math"
	"slices"
)

// What a job takes of a worker's resources. A job's declaration is
// optional, and so is each of its amounts: the worker counts what a job
// leaves out at its kind's default (SLUICE_WORKER_KIND_RESOURCES), else at
// one slot's share of its capacity. The worker that accepts a job and the
// scheduler that packs jobs onto workers count it by the same rule,
// ResourceDefaults.Need, from what the worker announced.

// ResourceDefaults are what a worker counts for the amounts a job leaves
// out: its kinds' defaults, else Share.
type ResourceDefaults struct {
	// Kinds are the defaults by kind (SLUICE_WORKER_KIND_RESOURCES).
	Kinds map[string]Resources
	// Share is one slot's share of the worker's capacity (SlotShare).
	Share Resources
}

// SlotShare is one slot's share of capacity when a worker has slots
// slots; nothing when its slots are unlimited (0). Each amount is rounded
// down (CPU to the finest share, memory to a byte), so that slots shares
// always fit in capacity: 2 cores over 3 slots is 0.666666 each, where
// rounding to the nearest (Div) would leave no room for the third.
func SlotShare(capacity Resources, slots int) Resources {
	if slots <= 0 {
		return Resources{}
	}
	return Resources{CPU: math.Floor(capacity.CPU/float64(slots)/cpuQuantum) * cpuQuantum, Memory: capacity.Memory / int64(slots)}
}

// Need is what a job of kind that declared declared (nil: nothing) takes
// of a worker with defaults d: its declaration, each amount it leaves at
// 0 taken from its kind's default, else from one slot's share.
func (d ResourceDefaults) Need(kind string, declared *Resources) Resources {
	def, ok := d.Kinds[kind]
	if !ok {
		def = d.Share
	}
	if declared == nil {
		return def
	}
	r := *declared
	if r.CPU == 0 {
		r.CPU = def.CPU
	}
	if r.Memory == 0 {
		r.Memory = def.Memory
	}
	return r
}

// Defaults are the resource defaults w announced: its kinds' defaults and
// one slot's share of its capacity.
func (w WorkerInfo) Defaults() ResourceDefaults {
	var capacity Resources
	if w.Resources != nil {
		capacity = *w.Resources
	}
	return ResourceDefaults{Kinds: w.KindResources, Share: SlotShare(capacity, w.Capacity)}
}

// NeverFits reports whether a job of kind that declared declared fits in
// the capacity of none of the live workers that run kind, and says so;
// false while no such worker is known (one may still come), when one of
// them counts no resources (it takes any job), or when declared is nil
// (the defaults fit by design).
func NeverFits(workers []WorkerInfo, kind string, declared *Resources) (string, bool) {
	if declared == nil {
		return "", false
	}
	var (
		known   bool
		largest Resources
	)
	for _, w := range workers {
		if !slices.Contains(w.Kinds, kind) {
			continue
		}
		if w.Resources == nil || w.Defaults().Need(kind, declared).Fits(*w.Resources) {
			return "", false
		}
		known = true
		largest = Resources{CPU: max(largest.CPU, w.Resources.CPU), Memory: max(largest.Memory, w.Resources.Memory)}
	}
	if !known {
		return "", false
	}
	return fmt.Sprintf("asks for %s, more than any live worker of kind %q has (the largest: cpu=%g, memory=%s)",
		declared, kind, largest.CPU, FormatMemory(largest.Memory)), true
}
