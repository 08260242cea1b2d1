package peers

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Peer names the system a target compares Sluice with; None compares
// Sluice's figure with an absolute bound.
type Peer string

// The peers.
const (
	None  Peer = ""
	River Peer = "River"
	Asynq Peer = "Asynq"
)

// Target is one goal of the issue: Sluice's figure against a peer's
// (Ratio: Sluice ÷ peer) or against a bound, higher or lower being better.
type Target struct {
	Figure Figure
	// Against is the peer of a ratio, or None for an absolute bound.
	Against Peer
	// Bound is the ratio (or value) to reach: at least it when
	// HigherBetter, at most it otherwise.
	Bound        float64
	HigherBetter bool
	// Aim is the stretch goal, for the table only (0: none).
	Aim string
}

// Targets are the goals of the store and dispatch work (issue 25).
var Targets = []Target{
	{Figure: BurnDown, Against: River, Bound: 1.0, HigherBetter: true, Aim: "aim 1.5×"},
	{Figure: Steady, Against: Asynq, Bound: 1.0, HigherBetter: true, Aim: "aim 1.5×"},
	{Figure: P99At500, Against: Asynq, Bound: 1.0, Aim: "aim ≤ 5 ms"},
	{Figure: P99At2000, Bound: 25},
	// Judged on the job rows written (a claim round of 256 jobs is 256).
	{Figure: RowsOneSecond, Bound: 1.5},
	// The same bound on write requests (a claim round is one), shown
	// beside it: not the goal.
	{Figure: WritesOneSecond, Bound: 1.5, Aim: "write requests, not rows"},
}

// Verdict is a target judged on one run's figures.
type Verdict struct {
	Target Target
	// Value is the ratio (or Sluice's figure for an absolute bound).
	Value float64
	// Known is false when a figure it needs is missing (Why says which).
	Known bool
	Met   bool
	Why   string
}

// Judge judges every target on Sluice's and the peers' figures of one run.
func Judge(targets []Target, sluice, river, asynq Figures) []Verdict {
	out := make([]Verdict, 0, len(targets))
	for _, t := range targets {
		v := Verdict{Target: t}
		s, ok := sluice[t.Figure]
		switch {
		case !ok:
			v.Why = "Sluice's figure missing"
		case t.Against == None:
			v.Value, v.Known = s, true
		default:
			peer := map[Peer]Figures{River: river, Asynq: asynq}[t.Against]
			p, ok := peer[t.Figure]
			switch {
			case !ok:
				v.Why = string(t.Against) + "'s figure missing"
			case p == 0:
				v.Why = string(t.Against) + "'s figure is 0"
			default:
				v.Value, v.Known = s/p, true
			}
		}
		if v.Known {
			v.Met = v.Value <= t.Bound
			if t.HigherBetter {
				v.Met = v.Value >= t.Bound
			}
		}
		out = append(out, v)
	}
	return out
}

// Name is how the table names the target.
func (t Target) Name() string {
	if t.Against == None {
		return strings.TrimSuffix(strings.TrimSuffix(string(t.Figure), " (ms)"), " (jobs/s)")
	}
	return fmt.Sprintf("%s vs %s", strings.TrimSuffix(strings.TrimSuffix(string(t.Figure), " (ms)"), " (jobs/s)"), t.Against)
}

// Goal is the target's bound as the table shows it.
func (t Target) Goal() string {
	op := "≤"
	if t.HigherBetter {
		op = "≥"
	}
	g := fmt.Sprintf("%s %g", op, t.Bound)
	if t.Against != None {
		g += "×"
	}
	if t.Aim != "" {
		g += " (" + t.Aim + ")"
	}
	return g
}

// Outcome is "met", "not met" or why it cannot be judged.
func (v Verdict) Outcome() string {
	switch {
	case !v.Known:
		return "unknown: " + v.Why
	case v.Met:
		return "met"
	}
	return "not met"
}

// Print writes the table: each figure with Sluice's, River's and Asynq's
// value, then each target with its ratio (or value), goal and outcome.
// note, when not empty, is said first (e.g. why the peers are missing).
func Print(w io.Writer, note string, sluice, river, asynq Figures, verdicts []Verdict) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if note != "" {
		fmt.Fprintf(tw, "%s\n\n", note)
	}
	fmt.Fprintf(tw, "figure\tSluice\tRiver\tAsynq\n")
	for _, f := range Order {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f, cell(sluice, f), cell(river, f), cell(asynq, f))
	}
	fmt.Fprintf(tw, "\ntarget\tvalue\tgoal\toutcome\n")
	for _, v := range verdicts {
		val := "–"
		if v.Known {
			val = trim(v.Value)
			if v.Target.Against != None {
				val += "×"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Target.Name(), val, v.Target.Goal(), v.Outcome())
	}
	return tw.Flush()
}

func cell(f Figures, fig Figure) string {
	v, ok := f[fig]
	if !ok {
		return "–"
	}
	return trim(v)
}

// trim prints v with the digits that matter: thousands without decimals,
// small values with up to three.
func trim(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
