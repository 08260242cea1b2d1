package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Backlog counts the ready jobs of kind waiting for a slot (see
// store.Store): a bounded count on the ready index and the oldest by
// creation.
func (s *Store) Backlog(ctx context.Context, kind string, now time.Time, limit int) (int, time.Time, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	filter := readyFilter(kind, now)
	n, err := s.jobs.CountDocuments(ctx, filter, options.Count().SetLimit(int64(limit)))
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("mongo: backlog of %q: %w", kind, err)
	}
	if n == 0 {
		return 0, time.Time{}, nil
	}
	var d struct {
		CreatedAt time.Time `bson:"created_at"`
	}
	err = s.jobs.FindOne(ctx, filter, options.FindOne().SetSort(bson.D{{Key: fCreatedAt, Value: 1}}).
		SetProjection(bson.D{{Key: fCreatedAt, Value: 1}})).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return int(n), time.Time{}, nil
	case err != nil:
		return 0, time.Time{}, fmt.Errorf("mongo: backlog of %q: %w", kind, err)
	}
	return int(n), d.CreatedAt.UTC(), nil
}
