package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// Kind is the job kind the probe handler runs.
const Kind = "probe"

// payload is a probe job's payload: how long to run, and whether to stall
// (report no progress; otherwise a job with a stall timeout reports some
// every progressEvery).
type payload struct {
	MS    int64 `json:"ms"`
	Stall bool  `json:"stall,omitempty"`
}

// progressEvery is how often a probe job with a stall timeout reports
// progress.
const progressEvery = 100 * time.Millisecond

// probe runs "probe" jobs: it sleeps for the payload's duration in small
// steps, stopping as soon as its context ends, and journals its start (with
// what the run takes of the worker, job.Resources, and the worker's
// capacity), the moment its context ended (if it did) and its end.
type probe struct {
	journal  *journal.Writer
	workerID string
	pid      int
	step     time.Duration
	// capacity is the worker's, journaled on every start line beside the
	// run's need, so the harness checks the declarations of a worker's
	// running jobs against it (capacity.go).
	capacity contracts.Resources
	log      zerolog.Logger
}

// handle is the probe kind's worker.Handler.
func (p *probe) handle(ctx context.Context, job worker.Job) (worker.Result, error) {
	var pl payload
	if err := json.Unmarshal(job.Payload, &pl); err != nil || pl.MS < 0 {
		return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: fmt.Errorf("probe: bad payload %q", job.Payload)}
	}
	start := time.Now()
	p.record(job, journal.EventStart, start, "")
	// The moment the worker cancels the handler (fenced, lease lost,
	// cancel request, shutdown), even in the middle of a step.
	recorded := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		p.record(job, journal.EventCtxDone, time.Now(), context.Cause(ctx).Error())
		close(recorded)
	})

	deadline := start.Add(time.Duration(pl.MS) * time.Millisecond)
	reports := job.StallTimeout > 0 && !pl.Stall
	lastReport := start
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if reports && time.Since(lastReport) >= progressEvery {
			lastReport = time.Now()
			pct := 100 * float64(time.Since(start)) / float64(deadline.Sub(start))
			_ = worker.ReportProgress(ctx, contracts.Progress{Percent: contracts.RoundPercent(min(pct, 100))})
		}
		t := time.NewTimer(min(left, p.step))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if !stopWatch() {
		<-recorded // the context ended: its line goes before the end
	} else if ctx.Err() != nil {
		// The context ended but the watcher had not started yet (the
		// parent closes Done before it runs its after-funcs): record it
		// now, a little later than it happened, which only lengthens the
		// run's live interval.
		p.record(job, journal.EventCtxDone, time.Now(), context.Cause(ctx).Error())
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		p.record(job, journal.EventEnd, time.Now(), cause.Error())
		return nil, fmt.Errorf("probe: stopped: %w", cause)
	}
	p.record(job, journal.EventEnd, time.Now(), "")
	return worker.JSON(map[string]int64{"slept_ms": pl.MS})
}

// record journals one event; a failed write is logged, never fatal (the
// harness then reports a run with no end).
func (p *probe) record(job worker.Job, event string, at time.Time, ctxErr string) {
	e := journal.Entry{
		JobID: job.ID, Attempt: job.Claim, WorkerID: p.workerID,
		Event: event, T: at.UnixNano(), CtxErr: ctxErr, PID: p.pid,
	}
	if event == journal.EventStart {
		need, capacity := job.Resources, p.capacity
		e.Need, e.Capacity = &need, &capacity
	}
	err := p.journal.Write(e)
	if err != nil {
		p.log.Error().Err(err).Str("event", event).Msg("probe: journal write failed")
	}
}
