package picker

import (
	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// minVersion is a View without the workers older than min: they are never
// offered a job (SLUICE_SCHEDULER_MIN_WORKER_VERSION), so an upgrade can retire the
// old ones while they finish what they run.
type minVersion struct {
	View
	min string
}

// MinVersion returns v without the workers whose announced version is
// older than min.
func MinVersion(v View, min string) View { return minVersion{View: v, min: min} }

func (m minVersion) ok(w contracts.WorkerInfo) bool {
	return contracts.CompareVersions(w.Version, m.min) >= 0
}

// Workers are the live workers at min or newer.
func (m minVersion) Workers() []contracts.WorkerInfo {
	all := m.View.Workers()
	out := all[:0:0]
	for _, w := range all {
		if m.ok(w) {
			out = append(out, w)
		}
	}
	return out
}

// Open walks the open workers at min or newer.
func (m minVersion) Open(kind string, fn func(contracts.WorkerInfo) bool) {
	m.View.Open(kind, func(w contracts.WorkerInfo) bool { return !m.ok(w) || fn(w) })
}

// Room counts the free slots of the workers at min or newer. Unlike the
// roster's, it looks at every worker: the price of a version floor.
func (m minVersion) Room() map[string]int {
	room := map[string]int{}
	for _, w := range m.Workers() {
		if free := roster.FreeSlots(w); free > 0 {
			for _, k := range w.Kinds {
				room[k] += free
			}
		}
	}
	return room
}

// Get is a live worker at min or newer.
func (m minVersion) Get(id string) (contracts.WorkerInfo, bool) {
	w, ok := m.View.Get(id)
	if !ok || !m.ok(w) {
		return contracts.WorkerInfo{}, false
	}
	return w, true
}
