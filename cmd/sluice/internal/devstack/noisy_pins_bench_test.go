package devstack

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// Sizes of BenchmarkNoisyPins.
const (
	// noisyPinBytes is the size of each pinned file.
	noisyPinBytes = 200 << 20
	// noisyPinLoops is how many pin loops the noisy tenant runs at once.
	noisyPinLoops = 4
	// noisyPinRun is how long the loops run.
	noisyPinRun = 10 * time.Second
)

// BenchmarkNoisyPins is issue 34's target "another tenant's submit p99
// stays <= 50 ms while one tenant pins 200 MB files in a loop". Tenant
// "noisy" pins 200 MB files under SLUICE_PIN_ROOTS (a temporary directory)
// in 4 loops at once, each submitting again as soon as it has its answer
// (after the Retry-After of a 429 or 503), while tenant "quiet" submits
// single jobs 20 ms apart. "changing" gives each loop a file of its own
// and rewrites 8 bytes of it before every pin, so every pin reads and
// hashes the whole file; "unchanged" has the 4 loops pin one file that
// does not change. No worker runs. It prints the quiet tenant's submit
// p50/p99 alone first, then under the pins, and the pins admitted per
// second.
func BenchmarkNoisyPins(b *testing.B) {
	dir := b.TempDir()
	files := make([]string, noisyPinLoops)
	for i := range files {
		files[i] = filepath.Join(dir, fmt.Sprintf("ref-%d.bin", i))
		writeNoisyPinFile(b, files[i])
	}
	b.Run("changing", func(b *testing.B) { noisyPins(b, dir, files, true) })
	b.Run("unchanged", func(b *testing.B) {
		same := make([]string, noisyPinLoops)
		for i := range same {
			same[i] = files[0]
		}
		noisyPins(b, dir, same, false)
	})
}

// writeNoisyPinFile writes noisyPinBytes of random bytes to path.
func writeNoisyPinFile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	block := make([]byte, 1<<20)
	if _, err := rand.Read(block); err != nil {
		b.Fatal(err)
	}
	for range noisyPinBytes / len(block) {
		if _, err := f.Write(block); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// noisyPins runs one case of BenchmarkNoisyPins: loop i pins files[i],
// rewriting its first 8 bytes before every pin when change is set.
func noisyPins(b *testing.B, root string, files []string, change bool) {
	// The per-tenant submit rate at its default, as a client meets it: a
	// pin that costs only a stat is then a plain submit, and bounded as
	// one. Both tenants send from 127.0.0.1: the per-IP limit stays off.
	base := twoTenantStack(b, map[string]string{
		"SLUICE_PIN_ROOTS":                 root,
		"SLUICE_MAX_ACTIVE":                "0",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT": fmt.Sprint(gateway.DefaultConfig().RateLimitTenant),
	})
	quiet := func(stop <-chan struct{}) ([]time.Duration, map[int]int) {
		return quietSubmits(base, 20*time.Millisecond, stop)
	}
	stop := make(chan struct{})
	time.AfterFunc(3*time.Second, func() { close(stop) })
	alone, _ := quiet(stop)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		pcodes = map[int]int{}
		ptook  []time.Duration
		failed string
	)
	stop = make(chan struct{})
	for i := range files {
		wg.Go(func() {
			var seq uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				if change {
					seq++
					if err := rewriteHead(files[i], seq); err != nil {
						mu.Lock()
						failed = err.Error()
						mu.Unlock()
						return
					}
				}
				body := fmt.Sprintf(`{"kind":"sleep","inputs":[{"name":"ref","uri":"file://%s","sha256":"pin"}]}`, files[i])
				start := time.Now()
				code, wait := pinPost(base, body)
				took := time.Since(start)
				mu.Lock()
				pcodes[code]++
				if code == http.StatusAccepted {
					ptook = append(ptook, took)
				}
				mu.Unlock()
				if wait > 0 {
					select {
					case <-stop:
						return
					case <-time.After(wait):
					}
				}
			}
		})
	}
	began := time.Now()
	time.AfterFunc(noisyPinRun, func() { close(stop) })
	lat, qcodes := quiet(stop)
	wg.Wait()
	elapsed := time.Since(began)
	if failed != "" {
		b.Fatal(failed)
	}
	if len(lat) == 0 || len(alone) == 0 {
		b.Fatal("no quiet submit measured")
	}
	pct := func(l []time.Duration) (p50, p99, mx time.Duration) {
		slices.Sort(l)
		return l[len(l)/2], l[len(l)*99/100], l[len(l)-1]
	}
	a50, a99, _ := pct(alone)
	p50, p99, mx := pct(lat)
	var pinMedian time.Duration
	if len(ptook) > 0 {
		pinMedian, _, _ = pct(ptook)
	}
	pinned := pcodes[http.StatusAccepted]
	rate := float64(pinned) / elapsed.Seconds()
	b.ReportMetric(float64(p50.Microseconds())/1000, "quiet-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "quiet-p99-ms")
	b.ReportMetric(rate, "pins/s")
	met := "met"
	if p99 > 50*time.Millisecond {
		met = "NOT met"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	fmt.Printf("noisy pins (%s): quiet tenant's single submits p50 %s, p99 %s, max %s (%d submits, answers %v; alone p50 %s, p99 %s); "+
		"target p99 <= 50 ms %s; the noisy tenant pinned %d files of %d MB in %d loops: %.2f pins/s (%.0f MB/s pinned), answers %v, median pin %s\n",
		b.Name(), r(p50), r(p99), r(mx), len(lat), qcodes, r(a50), r(a99), met,
		pinned, noisyPinBytes>>20, len(files), rate, rate*float64(noisyPinBytes>>20), pcodes, pinMedian.Round(time.Millisecond))
}

// rewriteHead writes seq over the first 8 bytes of the file at path: its
// content, mtime and ctime change, its size and inode do not.
func rewriteHead(path string, seq uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], seq)
	if _, err := f.WriteAt(head[:], 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// pinPost submits body as the noisy tenant and returns the status and how
// long a 429 or 503 asked to wait (its Retry-After; 1 s when it named
// none).
func pinPost(base, body string) (int, time.Duration) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(body))
	if err != nil {
		return 0, time.Second
	}
	req.Header.Set("Authorization", "Bearer "+noisyToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchClient.Do(req)
	if err != nil {
		return 0, time.Second
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		wait := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return resp.StatusCode, wait
	}
	return resp.StatusCode, 0
}
