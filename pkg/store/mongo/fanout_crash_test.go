package mongo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// dyingAfter is s on a client of its own whose calls all fail once n
// commands have succeeded with armed set: as if the process making them
// died there (or the server did, after answering the n-th).
func dyingAfter(t *testing.T, s *Store, uri string, n int64, armed *atomic.Bool) (*Store, context.Context) {
	t.Helper()
	ctx, die := context.WithCancel(t.Context())
	t.Cleanup(die)
	var seen atomic.Int64
	mon := &event.CommandMonitor{Succeeded: func(context.Context, *event.CommandSucceededEvent) {
		if armed.Load() && seen.Add(1) == n {
			die()
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Disconnect(context.Background())) })
	d := *s
	d.client = client
	d.db = client.Database(s.db.Name())
	d.jobs = d.db.Collection(jobsCollection)
	d.bodies = d.db.Collection(bodiesCollection)
	d.counters = d.db.Collection(countersCollection)
	d.stateCounts = d.db.Collection(stateCountsCollection)
	d.locks = d.db.Collection(locksCollection)
	return &d, ctx
}

// TestFanoutChildEndCrashKeepsTheWindow ends the first child of a window-1
// fan-out in a process that dies after each command of that end in turn
// (counting it on the parent, taking the cursor, stamping the next child,
// releasing it, ...), then lets Reconcile repair what it left and the other
// children end one by one: at no point are two children released and not
// ended, the parent ends with all four counted, and the counts of jobs by
// state equal the jobs after a check.
//
// A death after the cursor was taken and before the next child left the
// held state used to let Reconcile fill that place twice: it counted the
// open places before releasing the held child below the cursor, found
// none, and released one more.
func TestFanoutChildEndCrashKeepsTheWindow(t *testing.T) {
	t.Parallel()
	fresh := freshDatabase(ferretServer(t))
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	for n := int64(1); n <= 16; n++ {
		t.Run(fmt.Sprintf("dies after command %d", n), func(t *testing.T) {
			const grace = time.Minute
			clock := clocktest.New()
			uri := fresh()
			s := open(t, uri, WithReconcileGrace(grace), WithClock(clock.Now))
			var armed atomic.Bool
			dying, dyingCtx := dyingAfter(t, s, uri, n, &armed)

			parent := storetest.NewJob("a", base)
			parent.Payload, parent.Concurrency = nil, 1
			items := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`), json.RawMessage(`4`)}
			res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: parent, Items: items}})
			require.NoError(t, err)
			require.Equal(t, store.Admitted, res[0].Admission)
			pid := res[0].Job.ID
			openChildren := func() []contracts.Job {
				docs, err := s.findDocs(t.Context(), bson.D{{Key: fParent, Value: pid}, {Key: fReleased, Value: true},
					{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}}})
				require.NoError(t, err)
				jobs := make([]contracts.Job, len(docs))
				for i, d := range docs {
					jobs[i] = d.job()
				}
				return jobs
			}
			end := func(st *Store, ctx context.Context, c contracts.Job) error {
				_, err := st.Transition(ctx, store.Expect{ID: c.ID, State: c.State, Claim: c.Claim},
					store.Change{Now: base.Add(time.Second), State: contracts.StateSucceeded})
				return err
			}

			armed.Store(true)
			_ = end(dying, dyingCtx, get(t, s, contracts.ChildID(pid, 0))) // its first command, the end itself, succeeds
			require.Equal(t, contracts.StateSucceeded, get(t, s, contracts.ChildID(pid, 0)).State)

			for range 2 * len(items) {
				if get(t, s, pid).State.Final() {
					break
				}
				open := openChildren()
				require.LessOrEqual(t, len(open), 1, "released children not ended: %v", open)
				for _, c := range open {
					require.NoError(t, end(s, t.Context(), c))
				}
				if len(open) == 0 {
					// Stuck: Reconcile looks, the grace period passes, it
					// repairs.
					_, err := s.Reconcile(t.Context())
					require.NoError(t, err)
					clock.Advance(grace)
					_, err = s.Reconcile(t.Context())
					require.NoError(t, err)
				}
			}
			p := get(t, s, pid)
			require.Equal(t, contracts.StateSucceeded, p.State, "children %+v", p.Children)
			require.Equal(t, len(items), p.Children.Succeeded)
			// What the death left in the counts of jobs by state, a
			// check repairs.
			clock.Advance(store.StateCheckEvery)
			_, err = s.Reconcile(t.Context())
			require.NoError(t, err)
			requireStateCountsExact(t, s)
		})
	}
}
