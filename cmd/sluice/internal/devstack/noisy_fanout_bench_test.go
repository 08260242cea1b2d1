package devstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// noisyFanoutParents and noisyFanoutItems make the admission of
// BenchmarkNoisyFanout: 4 fan-outs of the most items one fan-out may hold
// (contracts.MaxItems), 400,000 children, in one batch request.
const (
	noisyFanoutParents = 4
	noisyFanoutItems   = contracts.MaxItems
)

// noisyFanoutBody is a batch of noisyFanoutParents fan-outs of
// noisyFanoutItems no-op (null) items each, window 1,000.
func noisyFanoutBody() []byte {
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for p := range noisyFanoutParents {
		if p > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"kind":"sleep","concurrency":1000,"items":[`)
		for i := range noisyFanoutItems {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("null")
		}
		sb.WriteString(`]}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// BenchmarkNoisyFanout is issue 25's target "a second tenant's
// single-submit p99 while one tenant admits 400k fan-out children:
// <= 50 ms". Tenant "noisy" admits 400,000 fan-out children in as few
// requests as the API allows (one batch of 4 fan-outs of 100,000 items;
// the request, batch-body, per-tenant items and rate limits are raised
// for it, and no worker runs, so nothing but the admission writes), while
// tenant "quiet" submits single jobs one after the other (10 ms apart).
// It prints the quiet tenant's submit p50/p99 alone first, then during
// the noisy admission, and how long that admission took.
func BenchmarkNoisyFanout(b *testing.B) {
	total := noisyFanoutParents * (1 + noisyFanoutItems)
	base := twoTenantStack(b, map[string]string{
		"SLUICE_MAX_ACTIVE":                      "0",
		"SLUICE_GATEWAY_TENANT_MAX_ITEMS":        "0",
		"SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST":   fmt.Sprint(total),
		"SLUICE_GATEWAY_MAX_BATCH_BYTES":         fmt.Sprint(8 << 20),
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST": fmt.Sprint(total),
	})
	quiet := func(stop <-chan struct{}) ([]time.Duration, map[int]int) {
		return quietSubmits(base, 10*time.Millisecond, stop)
	}
	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) })
	alone, _ := quiet(stop)

	body := noisyFanoutBody()
	var (
		wg    sync.WaitGroup
		code  int
		took  time.Duration
		admit = make(chan struct{})
	)
	wg.Go(func() {
		defer close(admit)
		start := time.Now()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/jobs/batch", bytes.NewReader(body))
		if err != nil {
			b.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+noisyToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := benchClient.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		defer resp.Body.Close()
		var out struct {
			Results []struct {
				Status int             `json:"status"`
				Error  json.RawMessage `json:"error"`
			} `json:"results"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		code, took = resp.StatusCode, time.Since(start)
		if err != nil {
			b.Error(err)
		}
		for i, r := range out.Results {
			if r.Status != http.StatusAccepted {
				b.Errorf("noisy batch: fan-out %d answered %d %s", i, r.Status, r.Error)
			}
		}
	})
	lat, codes := quiet(admit)
	wg.Wait()
	if code != http.StatusOK {
		b.Fatalf("noisy batch: status %d", code)
	}
	if len(lat) == 0 {
		b.Fatal("no quiet submit measured during the admission")
	}
	pct := func(l []time.Duration) (p50, p99, mx time.Duration) {
		slices.Sort(l)
		return l[len(l)/2], l[len(l)*99/100], l[len(l)-1]
	}
	a50, a99, _ := pct(alone)
	p50, p99, mx := pct(lat)
	b.ReportMetric(float64(p50.Microseconds())/1000, "quiet-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "quiet-p99-ms")
	b.ReportMetric(took.Seconds(), "admission-s")
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	fmt.Printf("noisy fan-out: quiet tenant's single submits p50 %s, p99 %s, max %s (%d submits, answers %v; target p99 <= 50 ms; alone p50 %s, p99 %s) "+
		"while the noisy tenant admitted %d fan-out children in one batch of %d fan-outs (%d bytes) in %s\n",
		r(p50), r(p99), r(mx), len(lat), codes, r(a50), r(a99),
		noisyFanoutParents*noisyFanoutItems, noisyFanoutParents, len(body), took.Round(time.Millisecond))
}

// quietSubmits is the quiet tenant of the noisy benchmarks: it submits one
// single job, waits gap, and again until stop is closed, and returns the
// latencies and the answers.
func quietSubmits(base string, gap time.Duration, stop <-chan struct{}) ([]time.Duration, map[int]int) {
	single := []byte(`{"kind":"sleep"}`)
	var lat []time.Duration
	codes := map[int]int{}
	for {
		select {
		case <-stop:
			return lat, codes
		default:
		}
		start := time.Now()
		code, err := tokenPost(base, "/v1/jobs", quietToken, single)
		if err != nil {
			code = 0
		}
		lat = append(lat, time.Since(start))
		codes[code]++
		time.Sleep(gap)
	}
}
