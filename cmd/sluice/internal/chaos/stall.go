package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Stall timeouts under chaos. stallShare of the jobs stall (their probe
// reports no progress) under a stall timeout of stallTimeout: each run must
// be stopped, and the job must end failed timeout: after its attempts.
// watchedShare of the jobs run under a stall timeout of watchedTimeout and
// report progress: they are counted (a worker frozen by SIGSTOP past the
// timeout makes some of them fail timeout:, legitimately).
const (
	stallShare     = 0.03
	stallTimeout   = 300 * time.Millisecond
	watchedShare   = 0.10
	watchedTimeout = 2 * time.Second
)

// stallReport is what checkStalls found.
type stallReport struct {
	// Stalled counts the stalling jobs; Caught those that ended failed
	// timeout:; Missed lists those that succeeded (never stopped).
	Stalled, Caught int
	Missed          []string
}

// checkStalls reads every stalling job from the store.
func checkStalls(ctx context.Context, st store.Store, ids []string) (stallReport, error) {
	var rep stallReport
	for _, id := range ids {
		j, err := st.Get(ctx, id)
		if err != nil {
			return rep, fmt.Errorf("chaos: read stalling job %s: %w", id, err)
		}
		rep.Stalled++
		switch {
		case j.State == contracts.StateSucceeded:
			rep.Missed = append(rep.Missed, id)
		case j.State == contracts.StateFailed && contracts.ClassOf(j.Error) == contracts.ClassTimeout:
			rep.Caught++
		}
	}
	return rep, nil
}
