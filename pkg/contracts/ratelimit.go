package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
)

// RateUsage is what one gateway's rate limits let through since its last
// RateUsage: per limit (LimitTenantRate, LimitIPRate), the requests taken
// from each key's bucket. Every other gateway takes as many from its own
// buckets, so the limits hold across replicas.
type RateUsage struct {
	// Gateway is the sender's instance id; a gateway ignores its own.
	Gateway string `json:"gateway"`
	// Used maps a limit to its keys' counts.
	Used map[string]map[string]int `json:"used"`
}

// Bounds of a RateUsage message.
const (
	// MaxRateUsageKeys is the most keys one RateUsage carries in all.
	MaxRateUsageKeys = 10000
	// maxRateKeyLen bounds one key (a tenant or a client address).
	maxRateKeyLen = 128
)

// DecodeRateUsage reads a RateUsage from another gateway and checks it:
// known limits, at most MaxRateUsageKeys keys of at most 128 bytes, and
// positive counts.
func DecodeRateUsage(b []byte) (RateUsage, error) {
	var u RateUsage
	if err := json.Unmarshal(b, &u); err != nil {
		return RateUsage{}, fmt.Errorf("decode rate usage: %w", err)
	}
	if u.Gateway == "" {
		return RateUsage{}, errors.New("decode rate usage: no gateway")
	}
	n := 0
	for limit, keys := range u.Used {
		if limit != LimitTenantRate && limit != LimitIPRate {
			return RateUsage{}, fmt.Errorf("decode rate usage: unknown limit %q", limit)
		}
		for k, c := range keys {
			n++
			switch {
			case n > MaxRateUsageKeys:
				return RateUsage{}, fmt.Errorf("decode rate usage: more than %d keys", MaxRateUsageKeys)
			case !ValidRateKey(k):
				return RateUsage{}, fmt.Errorf("decode rate usage: bad key of %d bytes", len(k))
			case c < 1:
				return RateUsage{}, fmt.Errorf("decode rate usage: %s %q: count %d", limit, k, c)
			}
		}
	}
	return u, nil
}

// ValidRateKey reports whether a rate-limit key (a tenant or a client
// address) can travel in a RateUsage: 1 to 128 bytes.
func ValidRateKey(k string) bool { return k != "" && len(k) <= maxRateKeyLen }
