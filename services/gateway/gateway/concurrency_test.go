package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// TestAdmissionConcurrentGateways runs two gateways on the same store file
// (two handles, like two processes) with eight submitters spread over both
// and checks that exactly the cap is admitted, while a sampler watches the
// store's active counts never exceed it.
func TestAdmissionConcurrentGateways(t *testing.T) {
	t.Parallel()
	const (
		submitters = 8
		perWorker  = 12
	)
	cases := []struct {
		name           string
		global, tenant int
		wantTotal      int // exact number of 202s; 0 = only the per-tenant check
	}{
		{name: "global", global: 25, wantTotal: 25},
		{name: "tenant", tenant: 7, wantTotal: 14},
		{name: "global below tenant sum", global: 10, tenant: 7, wantTotal: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, caps(tc.global, tc.tenant))
			b.addGateway()
			tokens := []string{tokenA, tokenB}
			tenants := []string{tenantA, tenantB}

			var (
				accepted [2]atomic.Int64
				rejected atomic.Int64
			)
			stop := make(chan struct{})
			var maxActive, maxTenant atomic.Int64
			var sampler sync.WaitGroup
			sampler.Add(1)
			go func() {
				defer sampler.Done()
				for {
					c, err := b.st.Stats(context.Background())
					if err == nil {
						storeMax(&maxActive, int64(c.Active()))
						for _, n := range c.TenantActive {
							storeMax(&maxTenant, int64(n))
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()

			var g errgroup.Group
			for i := range submitters {
				base := b.gws[i%2].srv.URL
				who := (i / 2) % 2
				g.Go(func() error {
					for n := range perWorker {
						body := fmt.Sprintf(`{"kind":"load","key":"s%d-%d"}`, i, n)
						status, err := post(base, tokens[who], body)
						if err != nil {
							return err
						}
						switch status {
						case http.StatusAccepted:
							accepted[who].Add(1)
						case http.StatusTooManyRequests:
							rejected.Add(1)
						default:
							return fmt.Errorf("submitter %d: status %d", i, status)
						}
					}
					return nil
				})
			}
			err := g.Wait()
			close(stop)
			sampler.Wait()
			require.NoError(t, err)

			total := accepted[0].Load() + accepted[1].Load()
			require.Equal(t, int64(submitters*perWorker), total+rejected.Load())
			require.Equal(t, int64(tc.wantTotal), total, "202s must equal the cap exactly")
			if tc.tenant > 0 {
				for w := range tenants {
					require.LessOrEqual(t, accepted[w].Load(), int64(tc.tenant), tenants[w])
				}
				require.LessOrEqual(t, maxTenant.Load(), int64(tc.tenant), "a tenant's active count exceeded its cap")
				if tc.global == 0 {
					require.Equal(t, int64(tc.tenant), accepted[0].Load())
					require.Equal(t, int64(tc.tenant), accepted[1].Load())
				}
			}
			if tc.global > 0 {
				require.LessOrEqual(t, maxActive.Load(), int64(tc.global), "the active count exceeded the global cap")
			}
			c := b.snap().counts
			require.Equal(t, int(total), c.Active())
			for w, name := range tenants {
				require.Equal(t, int(accepted[w].Load()), c.TenantActive[name], name)
			}
		})
	}
}

// storeMax raises m to v when v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// post submits body with token to the gateway at base and returns the
// status; it is safe to call from any goroutine.
func post(base, token, body string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/jobs", bytes.NewBufferString(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = res.Body.Close() }()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return 0, err
	}
	return res.StatusCode, nil
}
