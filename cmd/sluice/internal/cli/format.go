package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// sanitize makes a string from the server safe to print on a terminal:
// control characters (escape sequences included) and invalid UTF-8 become
// '?', so a job's error or progress message cannot move the cursor or
// change colours.
func sanitize(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// truncate shortens s to at most n runes, ending with "…" when cut.
func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// fmtDuration is a short, human duration: 0s, 850ms, 2.4s, 1m05s, 2h03m,
// 3d04h. Negative durations (clock skew) show as 0s.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// waitTime is how long a job waited for a worker: until it started, or
// until now while it is pending, or until it finished when it never ran.
// ok is false when there is nothing to show.
func waitTime(j contracts.Job, now time.Time) (time.Duration, bool) {
	switch {
	case j.CreatedAt.IsZero():
		return 0, false
	case j.StartedAt != nil:
		return j.StartedAt.Sub(j.CreatedAt), true
	case j.State == contracts.StatePending:
		return now.Sub(j.CreatedAt), true
	case j.FinishedAt != nil:
		return j.FinishedAt.Sub(j.CreatedAt), true
	}
	return 0, false
}

// runTime is how long a job has run: from its (last) start until it
// finished, or until now while it runs. ok is false when it never started.
func runTime(j contracts.Job, now time.Time) (time.Duration, bool) {
	switch {
	case j.StartedAt == nil:
		return 0, false
	case j.FinishedAt != nil:
		return j.FinishedAt.Sub(*j.StartedAt), true
	case j.State == contracts.StateRunning:
		return now.Sub(*j.StartedAt), true
	}
	return 0, false
}

// durationOr formats d when ok, "-" otherwise.
func durationOr(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return fmtDuration(d)
}

// fmtPercent is a progress percent rounded to a tenth, without a trailing
// ".0": "30" for 30.0003138, "42.5" for 42.46.
func fmtPercent(p float64) string {
	return strconv.FormatFloat(contracts.RoundPercent(p), 'f', -1, 64)
}

// fmtProgress is "42.5% stage: message", with the parts that are there.
func fmtProgress(p *contracts.Progress) string {
	if p == nil {
		return ""
	}
	s := fmtPercent(p.Percent) + "%"
	if p.Stage != "" {
		s += " " + sanitize(p.Stage)
		if p.Message != "" {
			s += ":"
		}
	}
	if p.Message != "" {
		s += " " + sanitize(p.Message)
	}
	return s
}

// fmtClock is a time of day in local time, to the second.
func fmtClock(t time.Time) string { return t.Local().Format("15:04:05") }

// fmtTime is an absolute local time with milliseconds.
func fmtTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05.000 MST") }

// describe is one line about a change: the state with the job's attempt
// (run number) of its max attempts (when the job is known), its claim (the
// dispatch claim counter, which fences stale results; not a run count),
// worker and error
// (and how long the job ran, once final), or the progress.
func describe(ev contracts.Event, job contracts.Job) string {
	switch ev.Type {
	case contracts.EventProgress:
		return fmt.Sprintf("%-9s  %s", "progress", fmtProgress(ev.Progress))
	case contracts.EventSnapshot, contracts.EventState:
	default:
		return sanitize(ev.Type)
	}
	parts := []string{fmt.Sprintf("%-9s", ev.State)}
	// A fan-out parent runs nothing itself: no attempt, no claim (its
	// progress lines count its children).
	if job.ID == ev.JobID && job.MaxAttempts > 0 && job.Children == nil {
		parts = append(parts, fmt.Sprintf("attempt %d/%d", job.Attempt, job.MaxAttempts))
	}
	if job.Children == nil {
		parts = append(parts, fmt.Sprintf("claim %d", ev.Claim))
	}
	if ev.Worker != "" {
		parts = append(parts, "on "+sanitize(ev.Worker))
	}
	if ev.Type == contracts.EventSnapshot && ev.Progress != nil && ev.State == contracts.StateRunning {
		parts = append(parts, fmtProgress(ev.Progress))
	}
	if ev.State.Final() && job.ID == ev.JobID {
		if d, ok := runTime(job, job.UpdatedAt); ok {
			parts = append(parts, "ran "+fmtDuration(d))
		}
	}
	if ev.Error != "" {
		parts = append(parts, sanitize(ev.Error))
	}
	return strings.Join(parts, "  ")
}
