package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Fault names in Report.Kills besides the services' own.
const (
	faultStreamDelete = "stream-delete"
	faultSigstop      = "sigstop"
)

// Report is what a run measured.
type Report struct {
	Store                                 StoreKind
	Submitted, Admitted, Rejected, Errors int
	RejectedBy                            map[string]int // by limit: "global", "tenant"
	Final                                 map[string]int // "succeeded", "cancelled", "failed:<class>"
	Lost                                  []string       // admitted ids missing or not final at the end
	Stuck                                 int            // jobs in the store not final at the end (also unacknowledged admissions)

	// Kills counts faults by target: kill -9 of a service (gateway,
	// scheduler, worker, reaper, natsd, store), stream deletes and SIGSTOPs.
	Kills map[string]int
	// Planned counts the faults the profile asked for besides random kills.
	Planned map[string]int
	// PendingAtDelete sums the pending jobs in the store at each stream delete.
	PendingAtDelete int
	// Exits counts services that exited by themselves and were restarted.
	Exits int

	Cap, MaxActive, MaxActiveAPI int
	TenantCap                    int
	MaxTenantActive              map[string]int
	WorkerLimit, MaxPerWorker    int
	MaxInFlight                  int // largest in-flight count a worker announced
	JournalPerWorker             int // most runs one worker process had going at once, from the journals
	// MaxRunning is the most jobs running at once; TotalLimit the sum of
	// the limits of the TotalWorkers worker processes alive at that
	// instant. OverTotal describes the instant where the jobs running
	// passed the sum of the limits then by the most (see capacity.go).
	MaxRunning, TotalLimit, TotalWorkers int
	OverTotal                            string
	// MaxCPU and MaxMemory are the instants at which one worker process's
	// runs held the largest share of its CPU and of its memory, by their
	// needs as the journals record them; OverResources lists instants at
	// which they needed more than its capacity (see capacity.go).
	// ResourceRuns counts the runs journaled with their need, ExplicitRuns
	// those whose job declared resources itself.
	MaxCPU, MaxMemory          resourceInstant
	OverResources              []string
	ResourceRuns, ExplicitRuns int

	Runs            int      // handler runs in the journals
	Overlaps        []string // overlapping attempts (see overlap.go)
	Resumed         int      // runs frozen past the self-fencing delay by SIGSTOP
	ResumedUnfenced int      // of those, runs that returned normally after SIGCONT before being fenced
	// LateAccepted counts, of those, runs whose result the store took:
	// the worker checks its lease once the handler returned and reports
	// nothing for an attempt whose lease went unacknowledged past the
	// self-fencing delay, so any is a broken fence.
	LateAccepted int
	ExpiryFenced int           // attempts a worker fenced on its own expiry check at handler start or return (worker logs)
	MaxTail      time.Duration // longest run of a resumed handler between SIGCONT and its fence or return
	TailOverlaps int           // such tails during which a newer attempt of the job was live
	StaleResults int           // results the schedulers ignored (old attempt), from their /metrics
	// PeakRSS is the largest resident memory (KiB) any process of each
	// service reached, as its kernel high-water mark read at each sample.
	PeakRSS map[string]int64
	// Dispatched is each scheduler's dispatches (jobs a worker accepted),
	// from their /metrics: the schedulers share the work.
	Dispatched   map[string]int
	MaxPerKey    int      // most live runs of one tenant's concurrency key at once (journals)
	KeyOverLimit []string // keys whose live runs passed their limit (see order.go)
	Inversions   int      // first runs started ahead of a waiting job of higher priority (counted, see order.go)
	FirstRuns    int      // first runs looked at for inversions
	BadJournal   int      // journal lines that did not decode or pair

	Fanouts, FanoutChildren      int      // admitted fan-out parents, and their children
	MaxPerWindow, MaxPerWindowOf int      // most live runs of one parent's children at once, and that parent's window
	WindowOverLimit              []string // parents whose children's live runs passed the window (see fanout.go)
	FanoutMiscounted             []string // parents whose counts or children are not right at the end

	Spawned, SpawnMax int // workers started on scale requests (over the run), and the most live at once allowed (see spawn.go)
	// MaxSpawnedCounted is the most spawned workers alive at once, not
	// counting those back from a freeze past the roster's expiry
	// (capacity.go). Measured, not a guarantee: the schedulers bound the
	// spawned workers their rosters show.
	MaxSpawnedCounted int

	Stalled, StallsCaught int      // admitted jobs whose probe stalls, and those that ended failed timeout: (see stall.go)
	StallsMissed          []string // stalling jobs that succeeded: never stopped

	Samples int
	Drain   time.Duration
}

// Summary is the one-line result.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos[%s]: submitted=%d admitted=%d rejected=%d (%s) errors=%d | %s | lost=%d stuck=%d",
		r.Store, r.Submitted, r.Admitted, r.Rejected, joinCounts(r.RejectedBy, nil), r.Errors,
		joinCounts(r.Final, nil), len(r.Lost), r.Stuck)
	fmt.Fprintf(&b, " | kills %s", joinCounts(r.Kills, func(k string) string {
		if k == faultStreamDelete {
			return fmt.Sprintf(" (pending %d)", r.PendingAtDelete)
		}
		return ""
	}))
	fmt.Fprintf(&b, " exits=%d", r.Exits)
	fmt.Fprintf(&b, " | max running per worker %d/%d (store), %d/%d (journal), announced %d; total %d/%d (%d workers alive then)",
		r.MaxPerWorker, r.WorkerLimit, r.JournalPerWorker, r.WorkerLimit, r.MaxInFlight, r.MaxRunning, r.TotalLimit, r.TotalWorkers)
	fmt.Fprintf(&b, " | max declared per worker cpu %s/%s memory %s/%s (journal: %d runs, %d declared by the job), over capacity %d",
		strconv.FormatFloat(r.MaxCPU.Held.CPU, 'f', -1, 64), strconv.FormatFloat(r.MaxCPU.Capacity.CPU, 'f', -1, 64),
		contracts.FormatMemory(r.MaxMemory.Held.Memory), contracts.FormatMemory(r.MaxMemory.Capacity.Memory),
		r.ResourceRuns, r.ExplicitRuns, len(r.OverResources))
	fmt.Fprintf(&b, " | max active %d/%d (api %d)", r.MaxActive, r.Cap, r.MaxActiveAPI)
	var tenants []string
	for t, n := range r.MaxTenantActive {
		tenants = append(tenants, fmt.Sprintf("%s=%d/%d", t, n, r.TenantCap))
	}
	sort.Strings(tenants)
	fmt.Fprintf(&b, " | max active per tenant %s", strings.Join(tenants, " "))
	fmt.Fprintf(&b, " | overlapping attempts=%d of %d runs (sigstopped past the fence: %d, returned unfenced after SIGCONT: %d, their results accepted: %d, expiry fences: %d; tail after SIGCONT max %s, %d during a newer attempt; stale results ignored: %d)",
		len(r.Overlaps), r.Runs, r.Resumed, r.ResumedUnfenced, r.LateAccepted, r.ExpiryFenced,
		r.MaxTail.Round(10*time.Microsecond), r.TailOverlaps, r.StaleResults)
	fmt.Fprintf(&b, " | max live per key %d/%d, priority inversions %d of %d first runs", r.MaxPerKey, keyLimit, r.Inversions, r.FirstRuns)
	fmt.Fprintf(&b, " | fan-outs %d (%d children), max live per window %d/%d, over the window %d, miscounted %d",
		r.Fanouts, r.FanoutChildren, r.MaxPerWindow, r.MaxPerWindowOf, len(r.WindowOverLimit), len(r.FanoutMiscounted))
	fmt.Fprintf(&b, " | stalling jobs %d, stopped timeout: %d, never stopped %d", r.Stalled, r.StallsCaught, len(r.StallsMissed))
	fmt.Fprintf(&b, " | spawned workers %d (live at once %d/%d, not counting those back from a freeze)", r.Spawned, r.MaxSpawnedCounted, r.SpawnMax)
	fmt.Fprintf(&b, " | dispatches by scheduler %s", joinCounts(r.Dispatched, nil))
	rss := map[string]int{}
	for svc, kb := range r.PeakRSS {
		rss[svc] = int((kb + 512) / 1024)
	}
	fmt.Fprintf(&b, " | peak RSS by service, MiB %s", joinCounts(rss, nil))
	fmt.Fprintf(&b, " | samples=%d drain=%s", r.Samples, r.Drain.Round(100*time.Millisecond))
	return b.String()
}

// joinCounts formats a map as sorted "k=v" pairs, each followed by
// extra(k) when extra is set.
func joinCounts(m map[string]int, extra func(string) string) string {
	var out []string
	for k, v := range m {
		s := fmt.Sprintf("%s=%d", k, v)
		if extra != nil {
			s += extra(k)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Violations lists every broken invariant; empty means the run passed.
func (r Report) Violations() []string {
	var v []string
	if len(r.Lost) > 0 {
		n := min(len(r.Lost), 10)
		v = append(v, fmt.Sprintf("%d admitted jobs lost (not final or missing), e.g. %v", len(r.Lost), r.Lost[:n]))
	}
	if r.Stuck > 0 {
		v = append(v, fmt.Sprintf("%d jobs in the store not final", r.Stuck))
	}
	if r.MaxActive > r.Cap {
		v = append(v, fmt.Sprintf("active %d above cap %d (store)", r.MaxActive, r.Cap))
	}
	// Both drivers read /v1/stats's active jobs in one reading.
	if r.MaxActiveAPI > r.Cap {
		v = append(v, fmt.Sprintf("active %d above cap %d (/v1/stats)", r.MaxActiveAPI, r.Cap))
	}
	// A scheduler that never dispatched while the others did hundreds
	// was starved (each one claims from the store on the same wake-ups).
	total := 0
	for _, n := range r.Dispatched {
		total += n
	}
	for name, n := range r.Dispatched {
		if n == 0 && total >= 300 {
			v = append(v, fmt.Sprintf("%s dispatched nothing while the schedulers dispatched %d", name, total))
		}
	}
	for t, n := range r.MaxTenantActive {
		if n > r.TenantCap {
			v = append(v, fmt.Sprintf("tenant %s had %d active jobs, tenant cap %d (store)", t, n, r.TenantCap))
		}
	}
	if len(r.WindowOverLimit) > 0 {
		v = append(v, fmt.Sprintf("fan-out windows passed: %v", r.WindowOverLimit[:min(len(r.WindowOverLimit), 10)]))
	}
	if len(r.StallsMissed) > 0 {
		v = append(v, fmt.Sprintf("stalling jobs never stopped by their stall timeout: %v", r.StallsMissed[:min(len(r.StallsMissed), 10)]))
	}
	if len(r.FanoutMiscounted) > 0 {
		v = append(v, fmt.Sprintf("fan-out parents miscounted: %v", r.FanoutMiscounted[:min(len(r.FanoutMiscounted), 10)]))
	}
	if r.MaxPerWorker > r.WorkerLimit {
		v = append(v, fmt.Sprintf("a worker ran %d jobs, limit %d (store)", r.MaxPerWorker, r.WorkerLimit))
	}
	if r.JournalPerWorker > r.WorkerLimit {
		v = append(v, fmt.Sprintf("a worker ran %d jobs, limit %d (journal)", r.JournalPerWorker, r.WorkerLimit))
	}
	if r.MaxInFlight > r.WorkerLimit {
		v = append(v, fmt.Sprintf("a worker announced %d jobs in flight, limit %d", r.MaxInFlight, r.WorkerLimit))
	}
	if len(r.OverResources) > 0 {
		v = append(v, fmt.Sprintf("a worker's running jobs needed more than its capacity (journal): %s", strings.Join(r.OverResources[:min(len(r.OverResources), 5)], "; ")))
	}
	if r.Runs > 0 && r.ExplicitRuns == 0 {
		v = append(v, "no journaled run declared resources: the capacity check measured defaults only")
	}
	if r.OverTotal != "" {
		v = append(v, r.OverTotal)
	}
	if r.ResumedUnfenced > 0 {
		v = append(v, fmt.Sprintf("%d runs frozen past their lease went on unfenced after SIGCONT", r.ResumedUnfenced))
	}
	if r.LateAccepted > 0 {
		v = append(v, fmt.Sprintf("%d results of runs frozen past the fence were accepted", r.LateAccepted))
	}
	if len(r.Overlaps) > 0 {
		n := min(len(r.Overlaps), 5)
		v = append(v, fmt.Sprintf("%d overlapping attempts, e.g. %s", len(r.Overlaps), strings.Join(r.Overlaps[:n], "; ")))
	}
	if len(r.KeyOverLimit) > 0 {
		v = append(v, fmt.Sprintf("concurrency keys over their limit: %s", strings.Join(r.KeyOverLimit, "; ")))
	}
	for fault, want := range r.Planned {
		if got := r.Kills[fault]; got < want {
			v = append(v, fmt.Sprintf("planned %d %s, did %d: the run did not test it", want, fault, got))
		}
	}
	if r.Admitted == 0 {
		v = append(v, "no job admitted: the run measured nothing")
	}
	if r.Samples == 0 {
		v = append(v, "no concurrency sample taken")
	}
	if r.Runs == 0 {
		v = append(v, "no handler run journaled")
	}
	return v
}
