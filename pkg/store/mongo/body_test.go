package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
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

// bodyInputs are pinned inputs for the bodies' tests.
var bodyInputs = []contracts.InputRef{{Name: "model", URI: "file:///m.bin", SHA256: "ab01", Version: "3"}}

// killer is a dialer whose connections all close, and which dials no
// more, once killed: every command after that fails, those that run
// "even when the caller's context has ended" too. A process that died.
type killer struct {
	dialer net.Dialer
	mu     sync.Mutex
	dead   bool
	conns  []net.Conn
}

// DialContext dials unless the process is dead.
func (k *killer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := k.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		_ = c.Close()
		return nil, errors.New("the process died")
	}
	k.conns = append(k.conns, c)
	return c, nil
}

// kill closes every connection and refuses new ones.
func (k *killer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
}

// killed reports whether kill ran.
func (k *killer) killed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

// killedAfter is s on a client of its own that dies (see killer) once n
// commands have succeeded with armed set.
func killedAfter(t *testing.T, s *Store, uri string, n int64, armed *atomic.Bool) (*Store, *killer) {
	t.Helper()
	k := &killer{}
	var seen atomic.Int64
	mon := &event.CommandMonitor{Succeeded: func(context.Context, *event.CommandSucceededEvent) {
		if armed.Load() && seen.Add(1) == n {
			k.kill()
		}
	}}
	// Once dead, a command finds no server at once; the server is known
	// before: a ping, unarmed.
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(mon).SetDialer(k).
		SetServerSelectionTimeout(100 * time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	require.Eventually(t, func() bool { return client.Ping(t.Context(), nil) == nil }, 30*time.Second, 10*time.Millisecond)
	d := *s
	d.client = client
	d.db = client.Database(s.db.Name())
	d.jobs = d.db.Collection(jobsCollection)
	d.bodies = d.db.Collection(bodiesCollection)
	d.counters = d.db.Collection(countersCollection)
	d.stateCounts = d.db.Collection(stateCountsCollection)
	d.locks = d.db.Collection(locksCollection)
	d.staged = d.db.Collection(stagedCollection)
	return &d, k
}

// ids reads the _id of every document of coll that filter matches.
func ids(t *testing.T, coll *mongo.Collection, filter bson.D) map[string]bool {
	t.Helper()
	cur, err := coll.Find(t.Context(), filter, options.Find().SetProjection(bson.D{{Key: fID, Value: 1}}))
	require.NoError(t, err)
	var docs []struct {
		ID string `bson:"_id"`
	}
	require.NoError(t, cur.All(t.Context(), &docs))
	out := make(map[string]bool, len(docs))
	for _, d := range docs {
		out[d.ID] = true
	}
	return out
}

// bodyless lists the jobs whose document says they have a body that is
// not there: never allowed.
func bodyless(t *testing.T, s *Store) []string {
	t.Helper()
	bodies := ids(t, s.bodies, bson.D{})
	var out []string
	for id := range ids(t, s.jobs, bson.D{{Key: fBody, Value: true}}) {
		if !bodies[id] {
			out = append(out, id)
		}
	}
	return out
}

// orphans lists the bodies whose job is not there.
func orphans(t *testing.T, s *Store) []string {
	t.Helper()
	jobs := ids(t, s.jobs, bson.D{})
	var out []string
	for id := range ids(t, s.bodies, bson.D{}) {
		if !jobs[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestAdmissionDyingLeavesNoJobWithoutItsBody admits a job with a payload
// and inputs, then a batch of one more and a fan-out stored in three
// batches (its parent with inputs of its own), in a process that dies
// after each of their commands in turn: at no point is there a job
// without its body, and once the grace period has passed Reconcile has
// swept every body left without its job. Every job left reads back with
// its payload.
func TestAdmissionDyingLeavesNoJobWithoutItsBody(t *testing.T) {
	t.Parallel()
	fresh := freshDatabase(ferretServer(t))
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	orphaned, complete := 0, false
	for n := int64(1); !complete; n++ {
		require.Less(t, n, int64(200), "the admissions never ended")
		done := t.Run(fmt.Sprintf("dies after command %d", n), func(t *testing.T) {
			const grace = time.Minute
			clock := clocktest.New()
			uri := fresh()
			s := open(t, uri, WithReconcileGrace(grace), WithClock(clock.Now), WithFanoutBatch(2))
			var armed atomic.Bool
			dying, k := killedAfter(t, s, uri, n, &armed)

			one := storetest.NewJob("a", base)
			one.Payload, one.Inputs = json.RawMessage(`{"one":1}`), bodyInputs
			two := storetest.NewJob("a", base.Add(time.Millisecond))
			two.Payload = json.RawMessage(`{"two":2}`)
			parent := storetest.NewJob("a", base.Add(2*time.Millisecond))
			parent.Payload, parent.Inputs, parent.Concurrency = nil, bodyInputs, 2
			items := []json.RawMessage{json.RawMessage(`"i0"`), json.RawMessage(`"i1"`), json.RawMessage(`"i2"`),
				json.RawMessage(`"i3"`), json.RawMessage(`"i4"`)}
			want := map[string]json.RawMessage{one.ID: one.Payload, two.ID: two.Payload, parent.ID: nil}
			for i, it := range items {
				want[contracts.ChildID(parent.ID, i)] = it
			}

			armed.Store(true)
			_, _, err1 := dying.Admit(t.Context(), one, store.Caps{})
			_, err2 := dying.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: two}, {Job: parent, Items: items}})
			if !k.killed() {
				require.NoError(t, err1)
				require.NoError(t, err2)
			}
			require.Empty(t, bodyless(t, s), "a job without its body")
			orphaned += len(orphans(t, s))

			for range 4 {
				_, err := s.Reconcile(t.Context())
				require.NoError(t, err)
				require.Empty(t, bodyless(t, s), "a job without its body")
				clock.Advance(grace + time.Second)
			}
			_, err := s.Reconcile(t.Context())
			require.NoError(t, err)
			require.Empty(t, orphans(t, s), "bodies left without their jobs")
			for id := range ids(t, s.jobs, bson.D{}) {
				j := get(t, s, id)
				require.Equal(t, string(want[id]), string(j.Payload), "payload of %s", id)
			}
			if !k.killed() {
				// The admissions ended before the process died: every
				// command of theirs has had its turn.
				require.Len(t, ids(t, s.jobs, bson.D{}), len(want), "every job admitted")
				complete = true
			}
		})
		require.True(t, done)
	}
	require.Positive(t, orphaned, "no death left a body without its job: the sweep was never put to the test")
}

// TestOrphanBodySweptAfterGrace: a body whose admission died before its
// job went in stays while the grace period runs (the admission may be
// alive: a new admission of its id is refused, its slots given back),
// then Reconcile sweeps it; and an admission of the id of an orphan older
// than the grace period replaces it.
func TestOrphanBodySweptAfterGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clock := clocktest.New()
	s := open(t, freshDatabase(ferretServer(t))(), WithReconcileGrace(grace), WithClock(clock.Now))
	ctx := t.Context()
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	swept := storetest.NewJob("a", base)
	swept.Payload = json.RawMessage(`{"swept":1}`)
	reused := storetest.NewJob("a", base)
	reused.Payload = json.RawMessage(`{"first":1}`)
	// Both bodies go in, then the process dies.
	require.NoError(t, s.insertBodies(ctx, []bodyDoc{newBodyDoc(swept, clock.Now()), newBodyDoc(reused, clock.Now())}))
	_, err := s.Get(ctx, swept.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	_, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{swept.ID, reused.ID}, orphans(t, s), "within the grace period they may be alive")
	again := reused
	again.Payload = json.RawMessage(`{"second":2}`)
	_, _, err = s.Admit(ctx, again, store.Caps{})
	require.ErrorIs(t, err, errBodyTaken)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.TenantActive["a"], "the refused admission gave its slot back")

	clock.Advance(grace + time.Second)
	j, adm, err := s.Admit(ctx, again, store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	require.JSONEq(t, `{"second":2}`, string(j.Payload))
	require.JSONEq(t, `{"second":2}`, string(get(t, s, again.ID).Payload), "the orphan was replaced")
	_, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Empty(t, orphans(t, s))
	require.JSONEq(t, `{"second":2}`, string(get(t, s, again.ID).Payload), "the sweep leaves a body with its job")
}

// TestBodySweepIsBoundedAndMovesOn: one sweep looks at sweepLimit bodies,
// oldest first, and the next goes on from there, so orphans behind many
// live jobs' bodies are reached; live bodies stay.
func TestBodySweepIsBoundedAndMovesOn(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clock := clocktest.New()
	s := open(t, freshDatabase(ferretServer(t))(), WithReconcileGrace(grace), WithClock(clock.Now))
	s.sweepLimit = 2
	ctx := t.Context()
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	var live []contracts.Job
	for i := range 3 {
		j := storetest.NewJob("a", base)
		j.Payload = json.RawMessage(fmt.Sprintf(`{"live":%d}`, i))
		got, _, err := s.Admit(ctx, j, store.Caps{})
		require.NoError(t, err)
		live = append(live, got)
	}
	clock.Advance(time.Second)
	var dead []bodyDoc
	for i := range 3 {
		j := storetest.NewJob("a", base)
		j.Payload = json.RawMessage(fmt.Sprintf(`{"dead":%d}`, i))
		dead = append(dead, newBodyDoc(j, clock.Now()))
	}
	require.NoError(t, s.insertBodies(ctx, dead))
	clock.Advance(grace + time.Second)

	var got []int
	for range 4 {
		n, err := s.sweepBodies(ctx)
		require.NoError(t, err)
		got = append(got, n)
	}
	require.Equal(t, []int{0, 1, 2, 0}, got, "two live bodies, then one live and one orphan, then two orphans, then round again")
	require.Empty(t, orphans(t, s))
	for i, j := range live {
		require.JSONEq(t, fmt.Sprintf(`{"live":%d}`, i), string(get(t, s, j.ID).Payload))
	}
}

// TestJobDocumentsKeepNoBody: a new job's document has no payload and no
// inputs, only the flag of its body; a job without either has neither
// flag nor body; Purge deletes the bodies of the jobs it deletes, a
// parent's children's too.
func TestJobDocumentsKeepNoBody(t *testing.T) {
	t.Parallel()
	s := open(t, freshDatabase(ferretServer(t))())
	ctx := t.Context()
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	with := storetest.NewJob("a", base)
	with.Payload, with.Inputs = json.RawMessage(`{"x":1}`), bodyInputs
	_, _, err := s.Admit(ctx, with, store.Caps{})
	require.NoError(t, err)
	without := storetest.NewJob("a", base)
	without.Payload = nil
	_, _, err = s.Admit(ctx, without, store.Caps{})
	require.NoError(t, err)
	parent := admitThreeItems(t, s, base)

	raw := func(id string) bson.M {
		var m bson.M
		require.NoError(t, s.jobs.FindOne(ctx, bson.D{{Key: fID, Value: id}}).Decode(&m))
		return m
	}
	for _, id := range []string{with.ID, contracts.ChildID(parent.ID, 0)} {
		m := raw(id)
		require.NotContains(t, m, fPayload)
		require.NotContains(t, m, "inputs")
		require.Equal(t, true, m[fBody])
	}
	require.NotContains(t, raw(without.ID), fBody)
	require.NotContains(t, raw(parent.ID), fBody)
	require.Len(t, ids(t, s.bodies, bson.D{}), 4, "one body for the job with a payload, one per child")

	now := base.Add(time.Second)
	for range 3 {
		claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", 10)}})
		require.NoError(t, err)
		for _, c := range claimed {
			_, err := s.Transition(ctx, store.Expect{ID: c.ID, State: c.State, Claim: c.Claim},
				store.Change{Now: now, State: contracts.StateSucceeded})
			require.NoError(t, err)
		}
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, parent.ID).State)
	n, err := s.Purge(ctx, now.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Empty(t, ids(t, s.bodies, bson.D{}), "the bodies went with their jobs")
}

// TestDocumentsOfThePreviousLayoutRead: a job document written before
// the split, with its payload and inputs in it and no body, reads back
// with them through Get, List and the claim, and keeps them through its
// result.
func TestDocumentsOfThePreviousLayoutRead(t *testing.T) {
	t.Parallel()
	s := open(t, freshDatabase(ferretServer(t))())
	ctx := t.Context()
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	j := storetest.NewJob("a", base)
	payload := json.RawMessage(`{"old":[1,2.50,-0]}`)
	// As the previous release wrote it.
	old := newJobDoc(j)
	old.Body, old.Payload, old.Inputs = false, string(payload), toInputDocs(bodyInputs)
	_, err := s.jobs.InsertOne(ctx, old)
	require.NoError(t, err)
	newer := storetest.NewJob("a", base.Add(time.Millisecond))
	newer.Payload = json.RawMessage(`{"new":1}`)
	_, _, err = s.Admit(ctx, newer, store.Caps{})
	require.NoError(t, err)

	check := func(what string, got contracts.Job) {
		t.Helper()
		require.Equal(t, string(payload), string(got.Payload), "%s: payload", what)
		require.Equal(t, bodyInputs, got.Inputs, "%s: inputs", what)
	}
	check("get", get(t, s, j.ID))
	listed, _, err := s.List(ctx, store.Query{Tenant: "a"})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	for _, l := range listed {
		if l.ID == j.ID {
			check("list", l)
		} else {
			require.JSONEq(t, `{"new":1}`, string(l.Payload))
		}
	}
	claimed, err := s.Claim(ctx, store.ClaimRequest{Now: base.Add(time.Second), Slots: map[string][]string{"test.kind": storetest.Slots("w1", 10)}})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	for _, c := range claimed {
		if c.ID == j.ID {
			check("claim", c)
		} else {
			require.JSONEq(t, `{"new":1}`, string(c.Payload), "the claim reads old and new documents together")
		}
	}
	out, err := s.UpdateEach(ctx, []string{j.ID}, func(int, contracts.Job) (store.Change, error) {
		return store.Change{Now: base.Add(2 * time.Second), State: contracts.StateSucceeded}, nil
	})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	check("get after the result", get(t, s, j.ID))
	require.Empty(t, orphans(t, s))
}
