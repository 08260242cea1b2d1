package mongo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/mongo/internal/ferrettest"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// server gives the URI of a database on the server under test; an empty
// name gives the URI with no database.
type server func(db string) string

// ferretServer starts an embedded FerretDB for t and its subtests.
func ferretServer(t testing.TB) server {
	t.Helper()
	srv := ferrettest.Start(t, t.TempDir())
	return srv.DatabaseURI
}

// freshDatabase returns a function handing out the URIs of databases no one
// used yet on srv.
func freshDatabase(srv server) func() string {
	var n atomic.Int64
	return func() string { return srv(fmt.Sprintf("sluice_t%d", n.Add(1))) }
}

// open opens a store on uri and closes it when t ends.
func open(t testing.TB, uri string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.Context(), uri, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// conformanceTimeout bounds each store call of the conformance suite.
const conformanceTimeout = 2 * time.Minute

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		// A server per subtest: the proxy passes one command at a time, so
		// subtests sharing a server would also share one core. FerretDB
		// scans a collection for most filters, so a fan-out of thousands
		// of children (ColdPartKeptForAFanoutStoredInChunks) can take
		// longer than the default call timeout on a loaded machine: the
		// suite checks what the driver does, not how fast FerretDB is.
		return skewable{open(t, ferretServer(t)("sluice"), WithTimeout(conformanceTimeout))}
	})
}

func TestDriver(t *testing.T) {
	runDriverTests(t, ferretServer(t))
}

// counter reads one admission counter.
func counter(t *testing.T, s *Store, scope string) counterDoc {
	t.Helper()
	var c counterDoc
	require.NoError(t, s.counters.FindOne(t.Context(), bson.D{{Key: fID, Value: scope}}).Decode(&c))
	return c
}

// setActive overwrites a counter behind the driver's back.
func setActive(t *testing.T, s *Store, scope string, n int64) {
	t.Helper()
	_, err := s.counters.UpdateOne(t.Context(), bson.D{{Key: fID, Value: scope}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fActive, Value: n}}}, {Key: "$inc", Value: bson.D{{Key: fVersion, Value: 1}}}})
	require.NoError(t, err)
}

// runDriverTests runs the tests of what this driver adds to the
// conformance suite against srv, each subtest in a database of its own.
func runDriverTests(t *testing.T, srv server) {
	fresh := freshDatabase(srv)
	base := time.Date(2031, time.March, 4, 5, 6, 7, 890_000_000, time.UTC)

	t.Run("ReconcileRepairsDrift", func(t *testing.T) {
		t.Parallel()
		s := open(t, fresh(), WithReconcileGrace(0))
		ctx := t.Context()
		for i, tenant := range []string{"a", "a", "b"} {
			_, adm, err := s.Admit(ctx, storetest.NewJob(tenant, base.Add(time.Duration(i)*time.Second)), store.Caps{})
			require.NoError(t, err)
			require.Equal(t, store.Admitted, adm)
		}
		setActive(t, s, store.GlobalScope, 8)      // 5 too high
		setActive(t, s, store.TenantScope("a"), 1) // 1 too low
		_, err := s.counters.DeleteOne(ctx, bson.D{{Key: fID, Value: store.TenantScope("b")}})
		require.NoError(t, err) // 1 missing

		drift, err := s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, drift)
		require.Equal(t, int64(3), counter(t, s, store.GlobalScope).Active)
		require.Equal(t, int64(2), counter(t, s, store.TenantScope("a")).Active)
		require.Equal(t, int64(1), counter(t, s, store.TenantScope("b")).Active)

		drift, err = s.Reconcile(ctx)
		require.NoError(t, err)
		require.Zero(t, drift)

		// Exact again: one more fits under a cap of 4, then no more.
		_, adm, err := s.Admit(ctx, storetest.NewJob("c", base), store.Caps{Global: 4})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
		_, adm, err = s.Admit(ctx, storetest.NewJob("c", base), store.Caps{Global: 4})
		require.NoError(t, err)
		require.Equal(t, store.RejectedGlobal, adm)
	})

	t.Run("ReconcileRepairsAFanoutLeftHalfWay", func(t *testing.T) {
		t.Parallel()
		const grace = time.Minute
		clock := clocktest.New()
		s := open(t, fresh(), WithReconcileGrace(grace), WithClock(clock.Now))
		ctx := t.Context()
		parent := admitThreeItems(t, s, base)
		// A process died after child 0 ended, before it counted on its
		// parent and released child 2; and one died before the admission
		// released child 1.
		now := base.Add(time.Second)
		_, err := s.jobs.UpdateOne(ctx, bson.D{{Key: fID, Value: contracts.ChildID(parent.ID, 0)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fState, Value: string(contracts.StateSucceeded)}, {Key: fFinishedAt, Value: now}}}})
		require.NoError(t, err)
		_, err = s.jobs.UpdateOne(ctx, bson.D{{Key: fID, Value: contracts.ChildID(parent.ID, 1)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fState, Value: stateHeld}}}})
		require.NoError(t, err)

		// Nothing moves before the parent stood still for the grace period.
		_, err = s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, stateHeld, getState(t, s, contracts.ChildID(parent.ID, 1)))
		clock.Advance(grace)
		drift, err := s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, drift)
		require.Equal(t, string(contracts.StatePending), getState(t, s, contracts.ChildID(parent.ID, 1)), "the held child below the cursor is released")
		require.Equal(t, string(contracts.StatePending), getState(t, s, contracts.ChildID(parent.ID, 2)), "the empty place in the window is filled")
		p, err := s.Get(ctx, parent.ID)
		require.NoError(t, err)
		require.Equal(t, 1, p.Children.Succeeded)

		// The rest end normally; the parent ends with them and frees its slots.
		for _, i := range []int{1, 2} {
			c, err := s.Get(ctx, contracts.ChildID(parent.ID, i))
			require.NoError(t, err)
			_, err = s.Transition(ctx, store.Expect{ID: c.ID, State: c.State, Claim: c.Claim},
				store.Change{Now: now, State: contracts.StateSucceeded})
			require.NoError(t, err)
		}
		p, err = s.Get(ctx, parent.ID)
		require.NoError(t, err)
		require.Equal(t, contracts.StateSucceeded, p.State)
		require.Equal(t, int64(0), counter(t, s, store.GlobalScope).Active)
	})

	t.Run("ReconcileEndsAFanoutWhoseAdmissionStoppedHalfWay", func(t *testing.T) {
		t.Parallel()
		const grace = time.Minute
		clock := clocktest.New()
		s := open(t, fresh(), WithReconcileGrace(grace), WithClock(clock.Now))
		ctx := t.Context()
		parent := admitThreeItems(t, s, base)
		// As if the gateway died storing the children: the last is missing.
		_, err := s.jobs.DeleteOne(ctx, bson.D{{Key: fID, Value: contracts.ChildID(parent.ID, 2)}})
		require.NoError(t, err)
		for range 2 { // the parent stands still, then its children do
			_, err = s.Reconcile(ctx)
			require.NoError(t, err)
			require.Equal(t, contracts.StatePending, get(t, s, parent.ID).State)
			clock.Advance(grace)
		}
		drift, err := s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, drift)
		p := get(t, s, parent.ID)
		require.Equal(t, contracts.StateFailed, p.State)
		require.Equal(t, contracts.ClassStale, contracts.ClassOf(p.Error))
		kids, _, err := s.List(ctx, store.Query{Parent: parent.ID})
		require.NoError(t, err)
		require.Empty(t, kids)
		require.Equal(t, int64(0), counter(t, s, store.GlobalScope).Active, "its slots are free")
	})

	t.Run("ReconcileLowersOnlyAfterGrace", func(t *testing.T) {
		t.Parallel()
		const grace = time.Minute
		clock := clocktest.New()
		s := open(t, fresh(), WithReconcileGrace(grace), WithClock(clock.Now))
		ctx := t.Context()
		j, _, err := s.Admit(ctx, storetest.NewJob("a", base), store.Caps{})
		require.NoError(t, err)
		setActive(t, s, store.GlobalScope, 3)
		setActive(t, s, store.TenantScope("a"), 0)

		// Too low is raised at once; too high is only noted.
		drift, err := s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, drift)
		require.Equal(t, int64(3), counter(t, s, store.GlobalScope).Active)
		require.Equal(t, int64(1), counter(t, s, store.TenantScope("a")).Active)

		// A release within the grace moves the version: watching restarts.
		clock.Advance(grace)
		_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
			store.Change{Now: base.Add(time.Second), State: contracts.StateCancelled})
		require.NoError(t, err)
		drift, err = s.Reconcile(ctx)
		require.NoError(t, err)
		require.Zero(t, drift)
		require.Equal(t, int64(2), counter(t, s, store.GlobalScope).Active)

		drift, err = s.Reconcile(ctx)
		require.NoError(t, err)
		require.Zero(t, drift, "the grace has not passed since the release")
		clock.Advance(grace)
		drift, err = s.Reconcile(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, drift)
		require.Zero(t, counter(t, s, store.GlobalScope).Active)
		require.Zero(t, counter(t, s, store.TenantScope("a")).Active)
	})

	t.Run("TwoStoresNeverExceedCap", func(t *testing.T) {
		t.Parallel()
		uri := fresh()
		stores := []*Store{open(t, uri), open(t, uri)}
		const capacity = 7
		caps := store.Caps{Global: capacity, Tenant: 5}
		var (
			admitted, finished atomic.Int64
			wg                 sync.WaitGroup
			errs               = make(chan error, 64)
			stop               = make(chan struct{})
			maxSeen            atomic.Int64
		)
		// A watcher checks the cap live from the jobs themselves.
		watch := sync.WaitGroup{}
		watch.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := stores[0].jobs.CountDocuments(t.Context(), bson.D{{Key: fState, Value: string(contracts.StatePending)}})
				if err != nil {
					errs <- err
					return
				}
				for n > maxSeen.Load() && !maxSeen.CompareAndSwap(maxSeen.Load(), n) {
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
		for w := range 6 {
			s := stores[w%2]
			wg.Go(func() {
				for i := range 15 {
					j, adm, err := s.Admit(t.Context(), storetest.NewJob(fmt.Sprintf("t%d", (w+i)%2), base), caps)
					if err != nil {
						errs <- err
						return
					}
					if adm != store.Admitted {
						continue
					}
					admitted.Add(1)
					// Finish every other job, from the other store.
					if i%2 == 0 {
						_, err := stores[(w+1)%2].Transition(t.Context(),
							store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
							store.Change{Now: base, State: contracts.StateCancelled})
						if err != nil {
							errs <- err
							return
						}
						finished.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		watch.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.LessOrEqual(t, maxSeen.Load(), int64(capacity))
		c, err := stores[1].Stats(t.Context())
		require.NoError(t, err)
		require.Equal(t, int(admitted.Load()-finished.Load()), c.Active())
		require.LessOrEqual(t, c.Active(), capacity)
		// While an admission is half-way its slot looks taken, so the racing
		// admissions above may have been turned away short of the cap. With
		// none half-way, admissions from either store fill it exactly: no
		// slot was lost on the way.
		for i := 0; c.Active() < capacity && i < 2*capacity; i++ {
			_, _, err := stores[i%2].Admit(t.Context(), storetest.NewJob(fmt.Sprintf("t%d", i%2), base), caps)
			require.NoError(t, err)
			c, err = stores[1].Stats(t.Context())
			require.NoError(t, err)
		}
		require.Equal(t, capacity, c.Active(), "the store fills up to the cap")
		_, adm, err := stores[0].Admit(t.Context(), storetest.NewJob("t0", base), caps)
		require.NoError(t, err)
		require.NotEqual(t, store.Admitted, adm, "an admission past the cap")
		drift, err := stores[0].Reconcile(t.Context())
		require.NoError(t, err)
		require.Zero(t, drift)
	})

	t.Run("ReconcileDuringAdmissions", func(t *testing.T) {
		t.Parallel()
		uri := fresh()
		s, reaper := open(t, uri), open(t, uri)
		const capacity = 5
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		done := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := reaper.Reconcile(t.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
		var workers sync.WaitGroup
		for w := range 4 {
			workers.Go(func() {
				for i := range 12 {
					j, adm, err := s.Admit(t.Context(), storetest.NewJob("a", base), store.Caps{Global: capacity})
					if err != nil {
						errs <- err
						return
					}
					if adm == store.Admitted && (w+i)%3 != 0 {
						if _, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: contracts.StatePending},
							store.Change{Now: base, State: contracts.StateFailed}); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
		workers.Wait()
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		c, err := s.Stats(t.Context())
		require.NoError(t, err)
		require.LessOrEqual(t, c.Active(), capacity)
		require.Equal(t, int64(c.Active()), counter(t, s, store.GlobalScope).Active)
	})

	t.Run("IndexesAndReopen", func(t *testing.T) {
		t.Parallel()
		uri := fresh()
		s := open(t, uri)
		j, _, err := s.Admit(t.Context(), storetest.NewJob("a", base), store.Caps{})
		require.NoError(t, err)
		// Opening again finds its indexes and its data.
		again := open(t, uri)
		got, err := again.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, j.ID, got.ID)

		cur, err := s.jobs.Indexes().List(t.Context())
		require.NoError(t, err)
		var specs []struct {
			Name string `bson:"name"`
		}
		require.NoError(t, cur.All(t.Context(), &specs))
		names := map[string]bool{}
		for _, sp := range specs {
			names[sp.Name] = true
		}
		for _, ix := range jobIndexes {
			require.True(t, names[ix.name], "index %s missing", ix.name)
		}
	})

	t.Run("DatabaseName", func(t *testing.T) {
		t.Parallel()
		s := open(t, srv(""))
		require.Equal(t, DefaultDatabase, s.Database())
		s = open(t, srv("from_uri"))
		require.Equal(t, "from_uri", s.Database())
		s = open(t, srv("from_uri"), WithDatabase("from_option"))
		require.Equal(t, "from_option", s.Database())
	})
}

func TestServerGoesDown(t *testing.T) {
	t.Parallel()
	srv := ferrettest.Start(t, t.TempDir())
	ctx := t.Context()
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	s := open(t, srv.DatabaseURI("sluice"), WithTimeout(300*time.Millisecond))
	setup, err := Open(ctx, srv.DatabaseURI("sluice"))
	require.NoError(t, err)
	j, _, err := setup.Admit(ctx, storetest.NewJob("a", base), store.Caps{Global: 10})
	require.NoError(t, err)
	require.NoError(t, setup.Close())
	srv.Stop()

	start := time.Now()
	calls := map[string]func() error{
		"ping": func() error { return s.Ping(ctx) },
		"admit": func() error {
			_, _, err := s.Admit(ctx, storetest.NewJob("a", base), store.Caps{Global: 10})
			return err
		},
		"get":  func() error { _, err := s.Get(ctx, j.ID); return err },
		"list": func() error { _, _, err := s.List(ctx, store.Query{}); return err },
		"transition": func() error {
			_, err := s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending},
				store.Change{Now: base, State: contracts.StateCancelled})
			return err
		},
		"heartbeat": func() error {
			_, err := s.Heartbeat(ctx, "w1", []contracts.Lease{{JobID: j.ID, Claim: 1}}, base, 0)
			return err
		},
		"stale":     func() error { _, err := s.Stale(ctx, store.StaleQuery{Now: base, HeartbeatBefore: base}); return err },
		"purge":     func() error { _, err := s.Purge(ctx, base, 10); return err },
		"stats":     func() error { _, err := s.Stats(ctx); return err },
		"reconcile": func() error { _, err := s.Reconcile(ctx); return err },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		require.ErrorContains(t, err, "mongo: ", name)
		require.NotErrorIs(t, err, store.ErrNotFound, name)
		require.NotErrorIs(t, err, store.ErrConflict, name)
	}
	require.Less(t, time.Since(start), 15*time.Second, "every call gave up within its timeout")
}

func TestServerDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	// Nothing listens on port 1.
	_, err := Open(ctx, "mongodb://127.0.0.1:1/sluice?connectTimeoutMS=200", WithTimeout(300*time.Millisecond))
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Contains(t, err.Error(), "mongo: open")

	_, err = Open(ctx, "http://nope")
	require.ErrorContains(t, err, "parse URI")
}

// getState reads the stored state of a job, as the driver keeps it.
func getState(t *testing.T, s *Store, id string) string {
	t.Helper()
	var d jobDoc
	require.NoError(t, s.jobs.FindOne(t.Context(), bson.D{{Key: fID, Value: id}}).Decode(&d))
	return d.State
}

// get reads a job that must exist.
func get(t *testing.T, s *Store, id string) contracts.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	return j
}

// admitThreeItems admits a fan-out of three items, window 2, created at.
func admitThreeItems(t *testing.T, s *Store, at time.Time) contracts.Job {
	t.Helper()
	parent := storetest.NewJob("a", at)
	parent.Payload, parent.Concurrency = nil, 2
	items := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`)}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: parent, Items: items}})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, res[0].Admission)
	return res[0].Job
}
