package apply

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// progressBook is what a scheduler holds of workers' progress reports
// between two flushes: per job, the newest report of its current claim,
// and the job as read at that claim's first report (for the events, so a
// report after the first costs no read).
//
// Memory is bounded by the jobs that reported lately: an entry goes when
// the job's result is applied here (end), when the claim is found lost
// (a heartbeat's answer, a flush that misses, a report of a newer claim),
// and when no report came for a whole flush period (drop, after each
// flush). Every method is safe for concurrent use.
type progressBook struct {
	mu      sync.Mutex
	entries map[string]*progressEntry // by job id
}

// progressEntry is one job's claim as the book holds it.
type progressEntry struct {
	// job is the job as read at the claim's first report: its id, claim
	// and worker fence every write of the entry.
	job contracts.Job
	// progress is the newest report of the claim.
	progress contracts.Progress
	// seq counts the claim's reports; a flush compares it to know
	// whether a newer report came while it wrote.
	seq uint64
	// dirty: progress waits for the next flush.
	dirty bool
	// written is the seq of the newest report a flush wrote (0: none).
	written uint64
	// ended: the job's result is being applied; reports of the claim
	// that come now are stale (the result stores progress).
	ended bool
	// seen is when the newest report came.
	seen time.Time
}

// progressWrite is one entry a flush writes: the claim and the report
// it carries.
type progressWrite struct {
	job      contracts.Job
	progress contracts.Progress
	seq      uint64
}

// noteOutcome is what the book made of a report.
type noteOutcome int

const (
	// noteUnknown: the book holds no entry for the report's claim; the
	// caller reads the job and adds it (add).
	noteUnknown noteOutcome = iota
	// noteKept: the report is the claim's newest now.
	noteKept
	// noteStale: the report's claim is not the one the book holds, or
	// the job is ending; drop it.
	noteStale
	// noteForeign: the book holds the report's claim for another worker;
	// refuse it.
	noteForeign
)

func newProgressBook() *progressBook {
	return &progressBook{entries: map[string]*progressEntry{}}
}

// note keeps rep as the newest report of its claim when the book holds
// that claim for rep's worker, and returns the job as read at the claim's
// first report (also for noteForeign: whose the claim is).
// replaced says a report not yet written was replaced by rep.
func (b *progressBook) note(rep contracts.ProgressReport, now time.Time) (job contracts.Job, out noteOutcome, replaced bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[rep.JobID]
	switch {
	case !ok || e.job.Claim < rep.Claim:
		return contracts.Job{}, noteUnknown, false
	case e.job.Claim > rep.Claim || e.ended:
		return contracts.Job{}, noteStale, false
	case e.job.Worker != rep.WorkerID:
		return e.job, noteForeign, false
	}
	replaced = e.dirty
	e.progress, e.dirty, e.seen = rep.Progress, true, now
	e.seq++
	return e.job, noteKept, replaced
}

// add starts the entry of job's claim with its first report, as read
// from the store (running at rep's claim on rep's worker). It returns
// false, keeping nothing, when the book meanwhile holds a newer claim or
// the job is ending. An entry of an older claim is replaced: lost
// reports whether it held a report not yet written (never to be).
func (b *progressBook) add(job contracts.Job, rep contracts.ProgressReport, now time.Time) (ok, lost bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, held := b.entries[job.ID]; held {
		if e.job.Claim >= job.Claim {
			return false, false
		}
		lost = e.dirty
	}
	// Only what the events and the fence need.
	kept := contracts.Job{ID: job.ID, Tenant: job.Tenant, Kind: job.Kind, Parent: job.Parent,
		State: job.State, Attempt: job.Attempt, Claim: job.Claim, Worker: job.Worker}
	b.entries[job.ID] = &progressEntry{job: kept, progress: rep.Progress, seq: 1, dirty: true, seen: now}
	return true, lost
}

// due returns the entries with a report not yet written, and marks them
// written: a newer report makes one dirty again, and settle marks it
// dirty again when its write failed.
func (b *progressBook) due() []progressWrite {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []progressWrite
	for _, e := range b.entries {
		if !e.dirty || e.ended {
			continue
		}
		e.dirty = false
		out = append(out, progressWrite{job: e.job, progress: e.progress, seq: e.seq})
	}
	return out
}

// failed marks w's entry dirty again after its write failed, unless a
// newer report already did or the entry went.
func (b *progressBook) failed(w progressWrite) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[w.job.ID]; ok && e.job.Claim == w.job.Claim && e.seq == w.seq && !e.ended {
		e.dirty = true
	}
}

// wrote records that a flush wrote w.
func (b *progressBook) wrote(w progressWrite) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[w.job.ID]; ok && e.job.Claim == w.job.Claim && w.seq > e.written {
		e.written = w.seq
	}
}

// end marks the entry of job's claim as ending, its result being
// applied, and returns its newest report unless a flush wrote it (nil
// also when the book holds nothing of that claim): a report this
// scheduler wrote already must not overwrite a newer one another
// scheduler wrote since. Reports of the claim that come afterwards are
// stale.
func (b *progressBook) end(jobID string, claim int64) *contracts.Progress {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[jobID]
	if !ok || e.job.Claim != claim {
		return nil
	}
	e.ended = true
	if e.written == e.seq {
		return nil
	}
	p := e.progress
	return &p
}

// forget drops the entry of jobID when it holds claim or an older one,
// and returns the seq of its newest report that no flush wrote (0 when
// there is none, or no entry went).
func (b *progressBook) forget(jobID string, claim int64) (unwritten uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[jobID]
	if !ok || e.job.Claim > claim {
		return 0
	}
	delete(b.entries, jobID)
	if e.written == e.seq {
		return 0
	}
	return e.seq
}

// drop removes the entries with no report since before: their job
// reports no more (it ended elsewhere, or it runs without reports) and
// a later report starts again from a read. (An entry still dirty then
// holds a report whose write failed, already counted.)
func (b *progressBook) drop(before time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, e := range b.entries {
		if e.seen.Before(before) {
			delete(b.entries, id)
		}
	}
}

// len is how many jobs the book holds.
func (b *progressBook) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}
