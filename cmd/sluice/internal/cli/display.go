package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// display shows a followed job's changes to the user.
type display interface {
	// update shows one change.
	update(Update)
	// note shows a message about the following itself (on stderr).
	note(string)
	// finish shows the job's final state and stops any live redraw.
	finish(contracts.Job)
	// stop stops any live redraw without a final line (on interrupt).
	stop()
}

// lineDisplay writes one line per change: for logs, pipes and files.
type lineDisplay struct {
	out, errw io.Writer
	// withJob prefixes each line with the job's id and kind (for the
	// tenant-wide stream).
	withJob bool
	mu      sync.Mutex
	last    map[string]string // job id → last line, to skip repeats
	shown   map[string]contracts.Progress
}

func newLineDisplay(out, errw io.Writer, withJob bool) *lineDisplay {
	return &lineDisplay{out: out, errw: errw, withJob: withJob, last: map[string]string{}, shown: map[string]contracts.Progress{}}
}

// line is the text of one change, without its time.
func (d *lineDisplay) line(u Update) string {
	text := describe(u.Event, u.Job)
	if d.withJob {
		kind := u.Event.Kind
		if kind == "" {
			kind = u.Job.Kind
		}
		text = fmt.Sprintf("%s  %-10s  %s", sanitize(u.Event.JobID), sanitize(kind), text)
	}
	return text
}

func (d *lineDisplay) update(u Update) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := u.Event.JobID
	if p := u.Event.Progress; p != nil {
		if prev, ok := d.shown[id]; ok && prev == *p && u.Event.Type == contracts.EventProgress {
			return // the snapshot line already showed it
		}
		d.shown[id] = *p
	}
	text := d.line(u)
	if d.last[id] == text {
		return
	}
	if d.withJob && len(d.last) > 10000 {
		clear(d.last) // the tenant stream never ends: keep memory bounded
		clear(d.shown)
	}
	d.last[id] = text
	at := u.Event.At
	if at.IsZero() {
		at = time.Now()
	}
	fmt.Fprintf(d.out, "%s  %s\n", fmtClock(at), text)
}

func (d *lineDisplay) note(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(d.errw, "sluice:", msg)
}

func (d *lineDisplay) finish(contracts.Job) {}

func (d *lineDisplay) stop() {}

// jsonDisplay writes every change as one JSON event per line
// (contracts.Event; the first is a "snapshot" event made from the job).
type jsonDisplay struct {
	out, errw io.Writer
	mu        sync.Mutex
}

func (d *jsonDisplay) update(u Update) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data, err := json.Marshal(u.Event)
	if err != nil {
		return
	}
	_, _ = d.out.Write(append(data, '\n'))
}

func (d *jsonDisplay) note(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(d.errw, "sluice:", msg)
}

func (d *jsonDisplay) finish(contracts.Job) {}

func (d *jsonDisplay) stop() {}

// nopDisplay shows nothing but notes.
type nopDisplay struct{ errw io.Writer }

func (d nopDisplay) update(Update)        {}
func (d nopDisplay) note(msg string)      { fmt.Fprintln(d.errw, "sluice:", msg) }
func (d nopDisplay) finish(contracts.Job) {}
func (d nopDisplay) stop()                {}

// barDisplay draws a live progress bar on a terminal: state changes are
// printed as lines above it, progress redraws it in place, and a ticker
// keeps its elapsed time current.
type barDisplay struct {
	out, errw io.Writer
	width     func() int
	now       func() time.Time

	mu      sync.Mutex
	job     contracts.Job
	have    bool
	drawn   bool
	stopped bool
	lines   *lineDisplay
	done    chan struct{}
	ticker  *time.Ticker
}

// barWidth is the number of cells of the bar itself.
const barWidth = 24

// newBarDisplay starts a bar on out (a terminal of width()).
func newBarDisplay(out, errw io.Writer, width func() int, now func() time.Time) *barDisplay {
	d := &barDisplay{
		out: out, errw: errw, width: width, now: now,
		lines: newLineDisplay(out, errw, false),
		done:  make(chan struct{}), ticker: time.NewTicker(500 * time.Millisecond),
	}
	go d.tick()
	return d
}

func (d *barDisplay) tick() {
	for {
		select {
		case <-d.done:
			return
		case <-d.ticker.C:
			d.mu.Lock()
			if !d.stopped && d.have {
				d.draw()
			}
			d.mu.Unlock()
		}
	}
}

// clearLine erases the bar; the caller holds mu.
func (d *barDisplay) clearLine() {
	if d.drawn {
		io.WriteString(d.out, "\r\x1b[K")
		d.drawn = false
	}
}

// draw redraws the bar; the caller holds mu.
func (d *barDisplay) draw() {
	line := barLine(d.job, d.now())
	w := d.width()
	if w <= 0 {
		w = 80
	}
	io.WriteString(d.out, "\r\x1b[K"+truncate(line, w-1))
	d.drawn = true
}

func (d *barDisplay) update(u Update) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.job, d.have = u.Job, true
	if u.Event.Type != contracts.EventProgress && !u.Job.State.Final() {
		d.clearLine()
		d.lines.update(u)
	}
	if !u.Job.State.Final() {
		d.draw()
	}
}

func (d *barDisplay) note(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clearLine()
	fmt.Fprintln(d.errw, "sluice:", msg)
	if d.have && !d.stopped {
		d.draw()
	}
}

func (d *barDisplay) finish(job contracts.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.halt()
	ev := contracts.StateEvent(job)
	if job.FinishedAt != nil {
		ev.At = *job.FinishedAt
	}
	d.lines.update(Update{Event: ev, Job: job})
}

func (d *barDisplay) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.stopped {
		d.halt()
	}
}

// halt stops the ticker and erases the bar; the caller holds mu.
func (d *barDisplay) halt() {
	d.stopped = true
	d.ticker.Stop()
	close(d.done)
	d.clearLine()
}

// barLine is the live line of a job: a bar with its percent, stage and
// message once it reports progress, and how long it has waited or run.
func barLine(j contracts.Job, now time.Time) string {
	switch j.State {
	case contracts.StatePending:
		d, _ := waitTime(j, now)
		return fmt.Sprintf("pending    waiting for a worker  %s", fmtDuration(d))
	case contracts.StateRunning:
	default:
		return string(j.State)
	}
	d, _ := runTime(j, now)
	var b strings.Builder
	if p := j.Progress; p != nil {
		filled := int(p.Percent / 100 * barWidth)
		filled = max(0, min(barWidth, filled))
		fmt.Fprintf(&b, "[%s%s] %3s%%", strings.Repeat("#", filled), strings.Repeat("-", barWidth-filled), fmtPercent(p.Percent))
		if p.Stage != "" {
			b.WriteString("  " + sanitize(p.Stage))
			if p.Message != "" {
				b.WriteString(":")
			}
		}
		if p.Message != "" {
			b.WriteString(" " + sanitize(p.Message))
		}
	} else {
		b.WriteString("running")
	}
	if j.Worker != "" {
		b.WriteString("  on " + sanitize(j.Worker))
	}
	b.WriteString("  " + fmtDuration(d))
	return b.String()
}
