package devstack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// Tokens of the two tenants of BenchmarkNoisyNeighbour.
const (
	noisyToken = "noisy-tenant-token-0123456789abcdef"
	quietToken = "quiet-tenant-token-0123456789abcdef"
)

// largestBatchBody is the heaviest batch the default limits allow: fan-out
// parents (concurrency 1) whose jobs and items together make
// SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST, the cost of a request.
func largestBatchBody() ([]byte, int) {
	total := gateway.DefaultConfig().MaxItemsPerRequest
	const parents = 4
	perParent := min(contracts.MaxItems, total/parents-1)
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for p := range parents {
		if p > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"kind":"sleep","concurrency":1,"items":[`)
		for i := range perParent {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%d", i)
		}
		sb.WriteString(`]}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String()), parents * (perParent + 1)
}

// tokenPost posts body to path with token and returns the status.
func tokenPost(base, path, token string, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// BenchmarkNoisyNeighbour measures what one tenant's largest requests cost
// another: tenant "noisy" submits the largest batch the limits allow, again
// and again, while tenant "quiet" submits single jobs one after the other;
// it reports the quiet tenant's submit latency. "defaults" runs every
// tenant limit at its default (the noisy tenant's batches are rate limited
// and bounded in flight); "store-worst-case" turns the rate limits and the
// per-tenant bounds off, so that every batch is admitted. Target: quiet
// p99 < 250 ms.
func BenchmarkNoisyNeighbour(b *testing.B) {
	def := gateway.DefaultConfig()
	b.Run("defaults", func(b *testing.B) {
		// Both tenants send from 127.0.0.1 here: the per-IP limit, which
		// would mix them, stays off.
		noisyNeighbour(b, map[string]string{"SLUICE_GATEWAY_RATE_LIMIT_TENANT": fmt.Sprint(def.RateLimitTenant)})
	})
	b.Run("store-worst-case", func(b *testing.B) {
		noisyNeighbour(b, map[string]string{"SLUICE_MAX_ACTIVE": "0", "SLUICE_GATEWAY_TENANT_MAX_ITEMS": "0"})
	})
}

// twoTenantStack starts a stack without workers for the tenants "noisy"
// and "quiet", with extra settings, waits until quiet can submit, and
// returns its HTTP base address.
func twoTenantStack(b *testing.B, extra map[string]string) string {
	o := Options{Workers: -1, NATSListen: "127.0.0.1:0", Log: zerolog.Nop()}
	env := map[string]string{
		"SLUICE_API_TOKENS":        "noisy:" + noisyToken + ",quiet:" + quietToken,
		"SLUICE_DISPATCH_DEADLINE": "1h",
	}
	for k, v := range extra {
		env[k] = v
	}
	o.Environ = testEnv(b.TempDir(), env)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	o.HTTPListener = ln
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	base := "http://" + s.HTTPAddr
	single := []byte(`{"kind":"sleep"}`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if code, _ := tokenPost(base, "/v1/jobs", quietToken, single); code == http.StatusAccepted {
			return base
		}
		if time.Now().After(deadline) {
			b.Fatal("stack not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noisyNeighbour runs BenchmarkNoisyNeighbour on a stack with extra
// settings.
func noisyNeighbour(b *testing.B, extra map[string]string) {
	base := twoTenantStack(b, extra)
	single := []byte(`{"kind":"sleep"}`)

	batch, items := largestBatchBody()
	const run = 15 * time.Second
	stop := time.Now().Add(run)
	var (
		wg      sync.WaitGroup
		batches int
		bcodes  = map[int]int{}
		btook   []time.Duration
	)
	wg.Go(func() {
		for time.Now().Before(stop) {
			start := time.Now()
			code, err := tokenPost(base, "/v1/jobs/batch", noisyToken, batch)
			if err != nil {
				code = 0
			}
			btook = append(btook, time.Since(start))
			bcodes[code]++
			batches++
		}
	})
	var (
		lat    []time.Duration
		qcodes = map[int]int{}
	)
	time.Sleep(100 * time.Millisecond) // the first batch is on its way
	for time.Now().Before(stop) {
		start := time.Now()
		code, err := tokenPost(base, "/v1/jobs", quietToken, single)
		if err != nil {
			code = 0
		}
		lat = append(lat, time.Since(start))
		qcodes[code]++
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if len(lat) == 0 {
		b.Fatal("no quiet submit measured")
	}
	slices.Sort(lat)
	slices.Sort(btook)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Microseconds())/1000, "quiet-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "quiet-p99-ms")
	fmt.Printf("noisy neighbour (%s): quiet tenant's single submits p50 %s, p99 %s, max %s (%d submits, answers %v; target p99 < 250 ms) "+
		"while the noisy tenant sent %d batches of %d jobs+items (%d bytes; answers %v, median %s each)\n",
		b.Name(), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond), len(lat), qcodes,
		batches, items, len(batch), bcodes, btook[len(btook)/2].Round(time.Millisecond))
}
