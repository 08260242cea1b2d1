package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Update is one change a follower saw: the change and the job as the
// follower knows it afterwards.
type Update struct {
	// Event is the change. A snapshot's Event is made from the job, with
	// type contracts.EventSnapshot.
	Event contracts.Event
	// Job is the job after the change. Between snapshots it is kept up to
	// date from the events, so fields events do not carry (result,
	// finished_at) may lag until the follower reads the job again.
	Job contracts.Job
}

// snapshotEvent describes a whole job as a snapshot event.
func snapshotEvent(job contracts.Job) contracts.Event {
	ev := contracts.StateEvent(job)
	ev.Type = contracts.EventSnapshot
	ev.Progress = job.Progress
	return ev
}

// decodeSnapshot reads the data of a snapshot event: a job.
func decodeSnapshot(data string) (contracts.Job, error) {
	var job contracts.Job
	if err := json.Unmarshal([]byte(data), &job); err != nil {
		return job, fmt.Errorf("decode snapshot: %w", err)
	}
	if job.ID == "" || !job.State.Valid() {
		return job, fmt.Errorf("decode snapshot: not a job")
	}
	return job, nil
}

// decodeEvent reads the data of a state or progress event. Unknown fields
// are allowed, so a newer server does not break an older client.
func decodeEvent(typ, data string) (contracts.Event, error) {
	var ev contracts.Event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return ev, fmt.Errorf("decode %s event: %w", typ, err)
	}
	if ev.Type == "" {
		ev.Type = typ
	}
	switch {
	case ev.JobID == "":
		return ev, fmt.Errorf("decode %s event: no job_id", typ)
	case ev.Type == contracts.EventState && !ev.State.Valid():
		return ev, fmt.Errorf("decode %s event: state %q is not a state", typ, ev.State)
	case ev.Type == contracts.EventProgress && ev.Progress == nil:
		return ev, fmt.Errorf("decode %s event: no progress", typ)
	}
	return ev, nil
}

// apply changes job as ev says and reports whether ev belongs to it and is
// not older than what the job already shows.
func apply(job *contracts.Job, ev contracts.Event) bool {
	if ev.JobID != job.ID || ev.Claim < job.Claim {
		return false
	}
	at := ev.At
	if at.IsZero() {
		at = time.Now()
	}
	switch ev.Type {
	case contracts.EventState:
		if job.State.Final() {
			return false // nothing leaves a final state
		}
		if ev.State == contracts.StateRunning && (job.State != contracts.StateRunning || ev.Claim != job.Claim) {
			job.StartedAt = &at
			job.Progress = nil
			job.Attempt++ // a new run (an earlier release's events carry no attempt)
		}
		if ev.State.Final() {
			job.FinishedAt = &at
		}
		if ev.Attempt > 0 {
			job.Attempt = ev.Attempt
		}
		job.State, job.Claim, job.Worker, job.Error = ev.State, ev.Claim, ev.Worker, ev.Error
		job.UpdatedAt = at
	case contracts.EventProgress:
		if ev.Progress == nil {
			return false
		}
		p := *ev.Progress
		job.Progress = &p
		job.Claim = ev.Claim
	default:
		return false
	}
	return true
}

// diff describes how a polled job differs from the previous read as the
// events that would have said so, oldest first.
func diff(prev, cur contracts.Job) []contracts.Event {
	var out []contracts.Event
	if prev.State != cur.State || prev.Claim != cur.Claim || prev.Worker != cur.Worker || prev.Error != cur.Error {
		out = append(out, contracts.StateEvent(cur))
	}
	if cur.Progress != nil && !cur.State.Final() && (prev.Progress == nil || *prev.Progress != *cur.Progress) {
		ev := contracts.StateEvent(cur)
		ev.Type, ev.State, ev.Error = contracts.EventProgress, "", ""
		p := *cur.Progress
		ev.Progress = &p
		out = append(out, ev)
	}
	return out
}
