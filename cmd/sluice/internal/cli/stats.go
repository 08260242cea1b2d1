package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

var cmdStats = &command{
	name:    "stats",
	summary: "show caps, active jobs, counts by state and workers",
	usage:   "stats [--json]",
	help: `
Shows the admission caps and how much of them is in use, the number of jobs
in each state, active jobs by tenant, and the live workers with their jobs
in flight and their capacity. --json prints the API's stats.

exit codes: 0 shown, 1 server error, 2 usage.`,
	run: runStats,
}

func runStats(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	if _, err := inv.parse(fs, args, 0, 0); err != nil {
		return 0, err
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	st, raw, err := c.Stats(ctx)
	if err != nil {
		return 0, err
	}
	if inv.g.json {
		inv.writeJSON(raw)
		return ExitOK, nil
	}
	writeStats(inv.env.Stdout, st, inv.env.Now())
	return ExitOK, nil
}

// statsKeyWidth is the width of the key column of the stats view.
const statsKeyWidth = 18

// capText is a cap for people: its number, or "none" for 0.
func capText(n int) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// writeStats writes the stats view.
func writeStats(w io.Writer, st contracts.Stats, now time.Time) {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-*s%s\n", statsKeyWidth, k+":", v) }
	active := fmt.Sprint(st.Active)
	if st.MaxActive > 0 {
		active += fmt.Sprintf(" of %d (%.0f%% of the global cap)", st.MaxActive, 100*float64(st.Active)/float64(st.MaxActive))
	}
	row("active", active)
	row("global cap", capText(st.MaxActive))
	row("tenant cap", capText(st.TenantMaxActive))
	counts := make([]string, 0, len(contracts.AllStates))
	for _, s := range contracts.AllStates {
		counts = append(counts, fmt.Sprintf("%s %d", s, st.Counts[s]))
	}
	row("jobs", strings.Join(counts, ", "))
	if len(st.TenantActive) > 0 {
		tenants := make([]string, 0, len(st.TenantActive))
		for t := range st.TenantActive {
			tenants = append(tenants, t)
		}
		sort.Strings(tenants)
		parts := make([]string, 0, len(tenants))
		for _, t := range tenants {
			parts = append(parts, fmt.Sprintf("%s %d", sanitize(t), st.TenantActive[t]))
		}
		row("active by tenant", strings.Join(parts, ", "))
	}
	inFlight, capacity, unlimited := 0, 0, false
	for _, wk := range st.Workers {
		inFlight += wk.InFlight
		capacity += wk.Capacity
		unlimited = unlimited || wk.Capacity <= 0
	}
	total := fmt.Sprintf("%d", len(st.Workers))
	if len(st.Workers) > 0 {
		total += fmt.Sprintf(", %d in flight of %s", inFlight, slotsText(capacity, unlimited))
	}
	row("workers", total)
	_, _ = io.WriteString(w, b.String())
	if len(st.Workers) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "WORKER\tIN FLIGHT\tCAPACITY\tKINDS\tSEEN")
	workers := append([]contracts.WorkerInfo(nil), st.Workers...)
	sort.Slice(workers, func(i, j int) bool { return workers[i].ID < workers[j].ID })
	for _, wk := range workers {
		id := sanitize(wk.ID)
		if wk.Draining {
			id += " (draining)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s ago\n", id, wk.InFlight, slotsText(wk.Capacity, wk.Capacity <= 0),
			sanitize(strings.Join(wk.Kinds, ",")), fmtDuration(now.Sub(wk.SeenAt)))
	}
	_ = tw.flush()
}

// slotsText is a capacity for people: "unlimited" when any worker has no
// limit.
func slotsText(n int, unlimited bool) string {
	if unlimited {
		return "unlimited"
	}
	return fmt.Sprint(n)
}
