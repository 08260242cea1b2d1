package mongo

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Concurrency-key locks. A claim counts a key's holders and then claims
// jobs of it in separate operations; two schedulers doing that at once
// could each see the last free slot. So a claim first takes the key's lock
// (one document per tenant and key in the locks collection, upserted when
// free or expired, a duplicate-key error when held) and keeps it until its
// claims of that key are written. A key whose lock another scheduler holds
// counts as full for this claim: its jobs wait for the next one, a few
// milliseconds later. A lock left by a scheduler that died expires after
// keyLockTTL.

// locksCollection holds the concurrency-key locks.
const locksCollection = "locks"

// keyLockTTL is how long a key lock holds at most; a claim takes
// milliseconds.
const keyLockTTL = 10 * time.Second

// keyLocks are the key locks one claim holds.
type keyLocks struct {
	s     *Store
	token string
	held  []string
}

func (s *Store) newKeyLocks() *keyLocks {
	return &keyLocks{s: s, token: uuid.NewString()}
}

// take tries to lock tenant's key at now; false means another claim holds it.
func (l *keyLocks) take(ctx context.Context, tenant, key string, now time.Time) (bool, error) {
	return l.takeID(ctx, "key\x00"+tenant+"\x00"+key, now)
}

// takeWorker tries to lock a worker's slots at now, for a claim that counts
// the jobs running on it and then claims jobs for it (the count and the
// claims are separate operations, as a key's are); false means another
// claim holds them.
func (l *keyLocks) takeWorker(ctx context.Context, worker string, now time.Time) (bool, error) {
	return l.takeID(ctx, "worker\x00"+worker, now)
}

// takeID tries to take the lock id at now.
func (l *keyLocks) takeID(ctx context.Context, id string, now time.Time) (bool, error) {
	ctx, cancel := l.s.call(ctx)
	defer cancel()
	_, err := l.s.locks.UpdateOne(ctx,
		bson.D{{Key: fID, Value: id}, {Key: "until", Value: bson.D{{Key: "$lte", Value: millis(now)}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: millis(now.Add(keyLockTTL))}, {Key: "token", Value: l.token}}}},
		options.UpdateOne().SetUpsert(true))
	switch {
	case mongo.IsDuplicateKeyError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lock %q: %w", id, err)
	}
	l.held = append(l.held, id)
	return true, nil
}

// release frees every lock taken, whatever ctx says.
func (l *keyLocks) release(ctx context.Context) {
	if len(l.held) == 0 {
		return
	}
	ctx, cancel := l.s.call(context.WithoutCancel(ctx))
	defer cancel()
	// Best effort: a lock not deleted expires after keyLockTTL.
	_, _ = l.s.locks.DeleteMany(ctx, bson.D{
		{Key: fID, Value: bson.D{{Key: "$in", Value: l.held}}},
		{Key: "token", Value: l.token},
	})
	l.held = nil
}
