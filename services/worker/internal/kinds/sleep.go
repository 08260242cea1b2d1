package kinds

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

// MaxSleepMS is the longest a sleep job may ask for: one day.
const MaxSleepMS = contracts.MaxSleepMS

// ParseSleepPayload decodes a sleep payload {"ms": N} with 0 ≤ N ≤
// MaxSleepMS, by the rule the gateway checks it with at submit
// (contracts.DecodeSleepPayload). A missing or null payload means 0 ms.
// Unknown fields, fractions and trailing data are errors.
func ParseSleepPayload(data []byte) (time.Duration, error) {
	p, err := contracts.DecodeSleepPayload(data)
	if err != nil {
		return 0, fmt.Errorf("sleep: %w", err)
	}
	return p.Duration(), nil
}

// SleepResult is the result of a sleep job.
type SleepResult struct {
	SleptMS int64 `json:"slept_ms"`
}

// RunSleep is the "sleep" kind: it waits for the payload's duration or until
// ctx ends, in which case it returns ctx's error. A bad payload is an input
// error.
func RunSleep(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	d, err := ParseSleepPayload(payload)
	if err != nil {
		return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: err}
	}
	if d > 0 {
		if err := sleep(ctx, d); err != nil {
			return nil, err
		}
	} else if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sleep: %w", err)
	}
	out, err := json.Marshal(SleepResult{SleptMS: d.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("sleep: encode result: %w", err)
	}
	return out, nil
}

// sleepSteps is how many progress reports a long sleep makes.
const sleepSteps = 20

// minProgressSleep is the shortest sleep that reports progress.
const minProgressSleep = 200 * time.Millisecond

// sleep waits d or until ctx ends, reporting its progress in steps when d
// is long enough to be worth watching (the worker throttles the reports).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var tick <-chan time.Time
	start := time.Now()
	if d >= minProgressSleep {
		tk := time.NewTicker(d / sleepSteps)
		defer tk.Stop()
		tick = tk.C
		_ = progress.Report(ctx, contracts.Progress{Percent: 0, Stage: "sleeping", Message: "0s of " + d.String()})
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sleep: %w", ctx.Err())
		case <-t.C:
			return nil
		case now := <-tick:
			done := min(now.Sub(start), d)
			pct := float64(done) / float64(d) * 100
			// Reporting is best effort: outside a worker there is no reporter.
			_ = progress.Report(ctx, contracts.Progress{Percent: pct, Stage: "sleeping",
				Message: done.Round(time.Millisecond).String() + " of " + d.String()})
		}
	}
}
