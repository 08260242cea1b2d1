package worker

import (
	"fmt"
	"math"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
)

// The resources a worker has and its running jobs declared: a bound
// beside the count of slots. A job takes its declaration (or its kind's
// default, else one slot's share) out of the worker's free resources when
// it is accepted and gives it back when its handler returns; an offered
// job that does not fit in what is free gets "busy", one that does not fit
// in the whole capacity "refused".

// Capacity is the worker's resources (SLUICE_WORKER_CPU,
// SLUICE_WORKER_MEMORY), read once validated.
func (c Config) Capacity() contracts.Resources {
	mem, _ := contracts.ParseMemory(c.Memory)
	return contracts.Resources{CPU: c.CPU, Memory: mem}
}

// KindDefaults are the resources of SLUICE_WORKER_KIND_RESOURCES by kind.
func (c Config) KindDefaults() map[string]contracts.Resources {
	m, _ := parseKindResources(c.KindResources)
	return m
}

// parseKindResources reads "kind:cpu=2,memory=1GiB;kind2:cpu=1".
func parseKindResources(s string) (map[string]contracts.Resources, error) {
	out := map[string]contracts.Resources{}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kind, spec, ok := strings.Cut(entry, ":")
		kind = strings.TrimSpace(kind)
		if !ok {
			return nil, fmt.Errorf("%q: want kind:cpu=N,memory=AMOUNT", entry)
		}
		if !contracts.ValidKind(kind) {
			return nil, fmt.Errorf("%q is not a kind", kind)
		}
		if _, dup := out[kind]; dup {
			return nil, fmt.Errorf("kind %q is given twice", kind)
		}
		r, err := contracts.ParseResources(spec)
		if err != nil {
			return nil, fmt.Errorf("kind %q: %w", kind, err)
		}
		out[kind] = r
	}
	return out, nil
}

// validateResources checks the resource variables into p.
func (c Config) validateResources(p *envconfig.Problems) {
	switch {
	case math.IsNaN(c.CPU) || math.IsInf(c.CPU, 0) || c.CPU < 0:
		p.Add("SLUICE_WORKER_CPU", "%g must be a positive number of cores", c.CPU)
	case c.CPU > contracts.MaxCPU:
		p.Add("SLUICE_WORKER_CPU", "%g cores is more than %d", c.CPU, contracts.MaxCPU)
	}
	if mem, err := contracts.ParseMemory(c.Memory); err != nil {
		p.Wrap("SLUICE_WORKER_MEMORY", err)
	} else if mem <= 0 {
		p.Add("SLUICE_WORKER_MEMORY", "%q must be more than 0", c.Memory)
	}
	if _, err := parseKindResources(c.KindResources); err != nil {
		p.Wrap("SLUICE_WORKER_KIND_RESOURCES", err)
	}
	target := func(name string, v float64) {
		if math.IsNaN(v) || v < 0 || v > 1 {
			p.Add(name, "%g must be a fraction between 0 and 1 (0 = off)", v)
		}
	}
	target("SLUICE_WORKER_TARGET_MEMORY", c.TargetMemory)
	target("SLUICE_WORKER_TARGET_CPU", c.TargetCPU)
	envconfig.Positive(p, "SLUICE_WORKER_SAMPLE_INTERVAL", c.SampleInterval)
	if c.Limits != "" {
		if m := contracts.LimitMechanism(c.Limits); !m.Valid() {
			p.Add("SLUICE_WORKER_LIMITS", "%q is not a mechanism (have %s)", c.Limits, strings.Join(mechanismNames(), ", "))
		}
	}
}

// mechanismNames are the names SLUICE_WORKER_LIMITS takes.
func mechanismNames() []string {
	out := make([]string, 0, len(contracts.LimitMechanisms))
	for _, m := range contracts.LimitMechanisms {
		out = append(out, string(m))
	}
	return out
}

// ledger is what the worker's running jobs declared against its capacity.
// Its methods are called with the worker's mu held.
type ledger struct {
	capacity contracts.Resources
	kinds    map[string]contracts.Resources
	// share is one slot's share of the capacity: the default of a kind
	// with none of its own (zero when the slots are unlimited).
	share contracts.Resources
	used  contracts.Resources
}

func newLedger(c Config) *ledger {
	l := &ledger{capacity: c.Capacity(), kinds: c.KindDefaults()}
	l.share = contracts.SlotShare(l.capacity, c.MaxConcurrent)
	return l
}

// need is what a job offered as spec takes: the rule the scheduler packs
// by too (contracts.ResourceDefaults.Need).
func (l *ledger) need(spec contracts.JobSpec) contracts.Resources {
	return l.defaults().Need(spec.Kind, spec.Resources)
}

// defaults are the worker's resource defaults, as it announces them.
func (l *ledger) defaults() contracts.ResourceDefaults {
	return contracts.ResourceDefaults{Kinds: l.kinds, Share: l.share}
}

// free is what the running jobs' declarations leave of the capacity.
func (l *ledger) free() contracts.Resources { return l.capacity.Sub(l.used) }

// take counts r as running.
func (l *ledger) take(r contracts.Resources) { l.used = l.used.Add(r) }

// give stops counting r.
func (l *ledger) give(r contracts.Resources) { l.used = l.used.Sub(r) }

// describe says what r asks of a worker that has free, for an answer's
// reason.
func describe(r, free contracts.Resources) string {
	return fmt.Sprintf("needs %s, %s free", r, free.Clamp())
}
