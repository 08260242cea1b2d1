package admission

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxWeight bounds a tenant's fair-queuing weight.
const MaxWeight = 1000

// Weights are the tenants' shares in fair queuing: within one priority,
// a tenant of weight 3 is offered three jobs for every one of a tenant of
// weight 1 while both have jobs waiting. A tenant not listed has weight 1.
type Weights map[string]float64

// Of is the weight of tenant.
func (w Weights) Of(tenant string) float64 {
	if v, ok := w[tenant]; ok {
		return v
	}
	return 1
}

// ParseWeights reads SLUICE_GATEWAY_TENANT_WEIGHTS: "tenant:weight,…", each
// weight a number above 0 and at most MaxWeight. Empty is no weights.
func ParseWeights(s string) (Weights, error) {
	w := Weights{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		tenant, value, ok := strings.Cut(item, ":")
		tenant = strings.TrimSpace(tenant)
		if !ok || tenant == "" {
			return nil, fmt.Errorf("%q: want tenant:weight", item)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || v <= 0 || v > MaxWeight {
			return nil, fmt.Errorf("%q: the weight must be a number above 0 and at most %d", item, MaxWeight)
		}
		if _, dup := w[tenant]; dup {
			return nil, fmt.Errorf("tenant %q is listed twice", tenant)
		}
		w[tenant] = v
	}
	return w, nil
}
