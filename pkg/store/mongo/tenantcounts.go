package mongo

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TenantCounts counts tenant's jobs by state (every state present, zeros
// included), children of its fan-outs included; held children count as
// pending, as in Stats.
func (s *Store) TenantCounts(ctx context.Context, tenant string) (map[contracts.JobState]int, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	out := make(map[contracts.JobState]int, len(contracts.AllStates))
	for _, st := range contracts.AllStates {
		out[st] = 0
	}
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fTenant, Value: tenant}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + fState}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("mongo: count the jobs of tenant %s: %w", tenant, err)
	}
	var groups []struct {
		State string `bson:"_id"`
		N     int    `bson:"n"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		return nil, fmt.Errorf("mongo: count the jobs of tenant %s: %w", tenant, err)
	}
	for _, g := range groups {
		st := contracts.JobState(g.State)
		if g.State == stateHeld {
			st = contracts.StatePending
		}
		out[st] += g.N
	}
	return out, nil
}
