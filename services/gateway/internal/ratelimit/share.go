package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// Sharer makes the buckets of several gateway replicas count together.
// Each replica answers from its own buckets at once (the hot path never
// waits on the network); every interval it publishes what it let through
// per key (contracts.RateUsage on contracts.SubjectRateUsage) and takes as
// many tokens from its buckets for what the others let through. Together
// the replicas stay within the rate, give or take what they let through
// in one interval; a lost message only loosens the limit for a moment.
// Two replicas that both start with full buckets may each spend a burst
// at once; they then owe it and refuse until the rate has paid it back.
type Sharer struct {
	nc     *nats.Conn
	id     string
	every  time.Duration
	limits map[string]*Limiter // by contracts limit word
	log    zerolog.Logger
}

// NewSharer shares limits (keyed by contracts.LimitTenantRate or
// contracts.LimitIPRate; nil limiters are skipped, and each must have
// been made with Options.Shared) among the gateways on nc. id names this
// replica; every is the interval of its reports.
func NewSharer(nc *nats.Conn, id string, every time.Duration, limits map[string]*Limiter, log zerolog.Logger) *Sharer {
	live := map[string]*Limiter{}
	for name, l := range limits {
		if l != nil {
			live[name] = l
		}
	}
	return &Sharer{nc: nc, id: id, every: every, limits: live, log: log}
}

// Run reports and applies usage until ctx ends.
func (s *Sharer) Run(ctx context.Context) error {
	if len(s.limits) == 0 || s.every <= 0 {
		<-ctx.Done()
		return nil
	}
	sub, err := s.nc.Subscribe(contracts.SubjectRateUsage, s.apply)
	if err != nil {
		return fmt.Errorf("rate limit: subscribe %s: %w", contracts.SubjectRateUsage, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.report()
			return nil
		case <-t.C:
			s.report()
		}
	}
}

// report publishes what this replica let through since the last report.
func (s *Sharer) report() {
	u := contracts.RateUsage{Gateway: s.id}
	n := 0
	for name, l := range s.limits {
		used := l.Drain()
		for k := range used {
			if !contracts.ValidRateKey(k) {
				delete(used, k) // no receiver would take it
			}
		}
		if len(used) == 0 {
			continue
		}
		if u.Used == nil {
			u.Used = map[string]map[string]int{}
		}
		u.Used[name] = used
		n += len(used)
	}
	if n == 0 {
		return
	}
	// Split a report that would exceed what a receiver accepts.
	for _, part := range splitUsage(u, contracts.MaxRateUsageKeys) {
		b, err := json.Marshal(part)
		if err != nil {
			continue // maps of strings and ints always encode
		}
		if err := s.nc.Publish(contracts.SubjectRateUsage, b); err != nil {
			s.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectRateUsage).
				Msg("rate limit usage not shared; the other gateways count it late or never")
			return
		}
	}
}

// apply takes from this replica's buckets what another let through.
func (s *Sharer) apply(m *nats.Msg) {
	u, err := contracts.DecodeRateUsage(m.Data)
	if err != nil {
		s.log.Warn().Err(err).Str(observe.FieldSubject, m.Subject).Msg("bad rate limit usage ignored")
		return
	}
	if u.Gateway == s.id {
		return
	}
	for name, keys := range u.Used {
		l := s.limits[name]
		for k, n := range keys {
			l.Take(k, n)
		}
	}
}

// splitUsage cuts u into reports of at most max keys each.
func splitUsage(u contracts.RateUsage, max int) []contracts.RateUsage {
	var (
		out []contracts.RateUsage
		cur = contracts.RateUsage{Gateway: u.Gateway, Used: map[string]map[string]int{}}
		n   int
	)
	for name, keys := range u.Used {
		for k, c := range keys {
			if n == max {
				out = append(out, cur)
				cur, n = contracts.RateUsage{Gateway: u.Gateway, Used: map[string]map[string]int{}}, 0
			}
			if cur.Used[name] == nil {
				cur.Used[name] = map[string]int{}
			}
			cur.Used[name][k] = c
			n++
		}
	}
	return append(out, cur)
}
