// Package scaling remembers the schedulers' latest scale requests (spawn on
// overflow), heard on NATS, for GET /v1/stats and the dashboard. Like the
// rejections, it is a view for people: in memory, the last few, one per
// gateway.
package scaling

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// MaxRecent is how many scale requests a Log keeps.
const MaxRecent = 10

// Log is the latest scale requests, safe for concurrent use.
type Log struct {
	mu     sync.Mutex
	recent []contracts.ScaleRequest // newest last
}

// Record remembers one request, dropping the oldest past MaxRecent.
func (l *Log) Record(r contracts.ScaleRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent = append(l.recent, r)
	if len(l.recent) > MaxRecent {
		l.recent = l.recent[len(l.recent)-MaxRecent:]
	}
}

// Recent lists the remembered requests, newest first.
func (l *Log) Recent() []contracts.ScaleRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]contracts.ScaleRequest, len(l.recent))
	for i, r := range l.recent {
		out[len(out)-1-i] = r
	}
	return out
}

// Listen records every request published on contracts.SubjectScaleRequest
// until ctx ends.
func (l *Log) Listen(ctx context.Context, nc *nats.Conn) error {
	sub, err := nc.Subscribe(contracts.SubjectScaleRequest, func(m *nats.Msg) {
		var r contracts.ScaleRequest
		if json.Unmarshal(m.Data, &r) == nil && contracts.ValidKind(r.Kind) {
			l.Record(r)
		}
	})
	if err != nil {
		return fmt.Errorf("scaling: subscribe %s: %w", contracts.SubjectScaleRequest, err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	return nil
}
