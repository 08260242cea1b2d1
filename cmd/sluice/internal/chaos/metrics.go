package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// staleResultsSeries is the scheduler counter of results it ignored
// because their attempt was no longer current.
const staleResultsSeries = `sluice_scheduler_results_total{outcome="stale"}`

// dispatchedSeries is the scheduler counter of jobs a worker accepted.
const dispatchedSeries = `sluice_scheduler_dispatches_total{outcome="dispatched"}`

// counterTotal sums a counter over the incarnations of several processes:
// each restart starts the counter from zero again, so a value lower than
// the last one seen means a new incarnation, and the last value of the old
// one is banked. Increments between the last scrape and a kill -9 are lost;
// scrape just before a kill to keep that gap small.
type counterTotal struct {
	mu     sync.Mutex
	banked map[string]float64
	last   map[string]float64
}

func newCounterTotal() *counterTotal {
	return &counterTotal{banked: map[string]float64{}, last: map[string]float64{}}
}

// observe records a scraped value of the counter of process name.
func (c *counterTotal) observe(name string, v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v < c.last[name] {
		c.banked[name] += c.last[name]
	}
	c.last[name] = v
}

// restarted banks the last value of name: its next incarnation starts at 0.
func (c *counterTotal) restarted(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.banked[name] += c.last[name]
	c.last[name] = 0
}

// byName is the sum over each process's incarnations.
func (c *counterTotal) byName() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]float64{}
	for k, v := range c.banked {
		out[k] += v
	}
	for k, v := range c.last {
		out[k] += v
	}
	return out
}

// total is the sum over every process and incarnation seen.
func (c *counterTotal) total() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t float64
	for _, v := range c.banked {
		t += v
	}
	for _, v := range c.last {
		t += v
	}
	return t
}

// scrapeCounter reads one series (name with labels, as exposed) from a
// Prometheus text endpoint; 0 when the series is absent.
func scrapeCounter(ctx context.Context, client *http.Client, url, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), series+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("scrape %s: %s: %w", url, series, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	return 0, nil
}
