package admission

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// workersTTL is how long a copy of the live workers answers the resource
// check of the submits that follow: a batch of a thousand jobs asks once,
// not a thousand times, and the roster itself is as old as the last
// announcements.
const workersTTL = 100 * time.Millisecond

// workerCopy is the live workers as Settings.Workers last listed them.
type workerCopy struct {
	mu   sync.Mutex
	at   time.Time
	list []contracts.WorkerInfo
}

// liveWorkers lists the live workers, read again past workersTTL.
func (a *Admitter) liveWorkers() []contracts.WorkerInfo {
	now := a.now()
	a.workers.mu.Lock()
	defer a.workers.mu.Unlock()
	if a.workers.list == nil || now.Sub(a.workers.at) >= workersTTL || now.Before(a.workers.at) {
		a.workers.list, a.workers.at = a.set.Workers(), now
	}
	return a.workers.list
}

// checkFits refuses with 422 a job whose resource request fits in the
// capacity of none of the live workers of its kind (contracts.NeverFits),
// once such workers are known; nil when it may run.
func (a *Admitter) checkFits(job contracts.Job) *Outcome {
	if job.Resources == nil || a.set.Workers == nil {
		return nil
	}
	if why, never := contracts.NeverFits(a.liveWorkers(), job.Kind, job.Resources); never {
		o := Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, "resources: "+why)
		return &o
	}
	return nil
}
