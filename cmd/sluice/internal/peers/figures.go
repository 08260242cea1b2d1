package peers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Figure names one measured figure of a comparison line.
type Figure string

// The figures compared.
const (
	// BurnDown is jobs/s draining 100k no-op jobs admitted before any worker.
	BurnDown Figure = "burn-down of 100k no-op jobs (jobs/s)"
	// Steady is jobs/s completed under single submits as fast as they go.
	Steady Figure = "steady, single submits, completed (jobs/s)"
	// P50At500 is submit → running p50 at 500 jobs/s, in ms.
	P50At500 Figure = "submit → running p50 at 500/s (ms)"
	// P99At500 is submit → running p99 at 500 jobs/s, in ms.
	P99At500 Figure = "submit → running p99 at 500/s (ms)"
	// P99At2000 is submit → running p99 at 2,000 jobs/s, in ms.
	P99At2000 Figure = "submit → running p99 at 2,000/s (ms)"
	// RowsBurnDown is store rows written per completed job in the burn-down.
	RowsBurnDown Figure = "store rows written per completed job, burn-down"
	// RowsSteady is store rows written per completed job in the steady run.
	RowsSteady Figure = "store rows written per completed job, steady"
	// RowsOneSecond is store rows written per completed job of 1 s,
	// heartbeats included: the figure the target is judged on.
	RowsOneSecond Figure = "store rows written per completed job, jobs of 1 s"
	// WritesBurnDown is store write requests per completed job in the burn-down.
	WritesBurnDown Figure = "store writes per completed job, burn-down"
	// WritesSteady is store write requests per completed job in the steady run.
	WritesSteady Figure = "store writes per completed job, steady"
	// WritesOneSecond is store write requests per completed job of 1 s,
	// heartbeats included (a claim round of 256 jobs is one).
	WritesOneSecond Figure = "store writes per completed job, jobs of 1 s"
)

// Order is the order of the table's rows.
var Order = []Figure{BurnDown, Steady, P50At500, P99At500, P99At2000, RowsBurnDown, RowsSteady, RowsOneSecond,
	WritesBurnDown, WritesSteady, WritesOneSecond}

// Figures are one system's measured figures; a figure not measured is absent.
type Figures map[Figure]float64

var (
	burnLine    = regexp.MustCompile(`^burn-down: \d+ jobs completed in \S+ = ([\d.]+) jobs/s`)
	steadyLine  = regexp.MustCompile(`^steady, 64 HTTP clients, single submits: ([\d.]+) jobs/s completed`)
	latencyLine = regexp.MustCompile(`^submit → running at (\d+) jobs/s: p50 (\S+), p99 (\S+),`)
	writesLine  = regexp.MustCompile(`^(store (?:rows written|writes) per completed job, [^:]+): ([\d.]+)`)
)

// ParseSluice reads the figures out of the output of Sluice's benchmarks
// (cmd/sluice/internal/devstack): the lines BenchmarkBurnDown,
// BenchmarkEndToEnd and BenchmarkOneSecondJobs print (rows written and
// write requests per job: reportWrites). Other lines are
// skipped; a figure printed twice keeps the last.
func ParseSluice(r io.Reader) (Figures, error) {
	f := Figures{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := burnLine.FindStringSubmatch(line); m != nil {
			if err := f.setNumber(BurnDown, m[1]); err != nil {
				return nil, err
			}
		}
		if m := steadyLine.FindStringSubmatch(line); m != nil {
			if err := f.setNumber(Steady, m[1]); err != nil {
				return nil, err
			}
		}
		if m := latencyLine.FindStringSubmatch(line); m != nil {
			p50, p99 := P50At500, P99At500
			switch m[1] {
			case "500":
			case "2000":
				p50, p99 = "", P99At2000
			default:
				continue
			}
			if p50 != "" {
				if err := f.setDuration(p50, m[2]); err != nil {
					return nil, err
				}
			}
			if err := f.setDuration(p99, m[3]); err != nil {
				return nil, err
			}
		}
		if m := writesLine.FindStringSubmatch(line); m != nil {
			fig := Figure(m[1])
			if slices.Contains(Order, fig) {
				if err := f.setNumber(fig, m[2]); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read Sluice's figures: %w", err)
	}
	return f, nil
}

func (f Figures) setNumber(fig Figure, s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%s: %q: %w", fig, s, err)
	}
	f[fig] = v
	return nil
}

func (f Figures) setDuration(fig Figure, s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%s: %q: %w", fig, s, err)
	}
	f[fig] = float64(d) / float64(time.Millisecond)
	return nil
}

// peerSource is where one peer figure comes from in the harness's
// results: a file of JSON lines, the label of the setting, the field.
type peerSource struct {
	file, label, field string
	fig                Figure
}

var riverSources = []peerSource{
	{"river-burn", "w1000", "burn_per_s", BurnDown},
	{"river-steady", "w1000-max", "completed_per_s", Steady},
	{"river-steady", "w1000-r500", "lat_p50_ms", P50At500},
	{"river-steady", "w1000-r500", "lat_p99_ms", P99At500},
}

var asynqSources = []peerSource{
	{"asynq-burn", "c500", "burn_per_s", BurnDown},
	{"asynq-steady", "c100-max", "completed_per_s", Steady},
	{"asynq-steady", "c100-10ms-r500", "lat_p50_ms", P50At500},
	{"asynq-steady", "c100-10ms-r500", "lat_p99_ms", P99At500},
}

// Mark is how many lines each results file of the harness held: a run's
// own lines are those after its mark.
type Mark map[string]int

// MarkResults counts the lines of each results file in dir (a missing
// directory is an empty mark).
func MarkResults(dir string) (Mark, error) {
	m := Mark{}
	for _, s := range slices.Concat(riverSources, asynqSources) {
		lines, err := readLines(filepath.Join(dir, s.file+".jsonl"))
		if err != nil {
			return nil, err
		}
		m[s.file] = len(lines)
	}
	return m, nil
}

// ReadPeers reads River's and Asynq's figures from the harness's results
// in dir, only the lines after since; a figure measured more than once
// there is the median.
func ReadPeers(dir string, since Mark) (river, asynq Figures, err error) {
	if river, err = readPeer(dir, since, riverSources); err != nil {
		return nil, nil, err
	}
	if asynq, err = readPeer(dir, since, asynqSources); err != nil {
		return nil, nil, err
	}
	return river, asynq, nil
}

func readPeer(dir string, since Mark, sources []peerSource) (Figures, error) {
	f := Figures{}
	for _, s := range sources {
		lines, err := readLines(filepath.Join(dir, s.file+".jsonl"))
		if err != nil {
			return nil, err
		}
		var vals []float64
		for i, l := range lines {
			if i < since[s.file] {
				continue
			}
			var row struct {
				Opts struct {
					Label string `json:"label"`
				} `json:"opts"`
			}
			var fields map[string]any
			if json.Unmarshal([]byte(l), &row) != nil || json.Unmarshal([]byte(l), &fields) != nil {
				return nil, fmt.Errorf("%s.jsonl line %d: not a result", s.file, i+1)
			}
			if v, ok := fields[s.field].(float64); ok && row.Opts.Label == s.label {
				vals = append(vals, v)
			}
		}
		if len(vals) > 0 {
			slices.Sort(vals)
			f[s.fig] = vals[len(vals)/2]
		}
	}
	return f, nil
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read peer results: %w", err)
	}
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out, nil
}
