package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// A store keeps a job's payload, and each fan-out item as its child's
// payload, as the bytes it was given: no number is re-encoded (a big
// integer, a negative zero, an exponent), no string escape rewritten, on
// every path in (Admit, AdmitBatch of plain jobs, of fan-outs) and every
// path out (Get, List, Claim).
var payloadTests = []test{
	{"FanoutItemsKeptByteForByte", testFanoutItemsExact},
	{"PayloadKeptByteForByte", testPayloadExact},
}

// hardJSON are JSON documents that a store re-encoding numbers or strings
// would change. The gateway hands a store compact JSON, as these are.
var hardJSON = []string{
	`12345678901234567890`,
	`-0`,
	`123456789012345678901234567890123456789`,
	`1.5e300`,
	`{"a":1e-7,"b":"\u00e9"}`,
	`[[1,[2.50,[-0.0,[]]]],[{}],[1E+2,-1e-400]]`,
	`1e400`,
	`"\u0000\ud83d\ude00 \/ \"q\" é"`,
	`0.1000000000000000055511151231257827`,
	`true`,
	`null`,
	`{"b":1,"a":2,"a":3}`,
}

// requireBytes checks a payload is exactly want.
func requireBytes(t *testing.T, what, want string, got []byte) {
	t.Helper()
	require.Equal(t, want, string(got), "%s: the payload changed", what)
}

// testFanoutItemsExact: each child's payload is its item, byte for byte.
func testFanoutItemsExact(t *testing.T, s store.Store) {
	j := NewJob("acme", base)
	j.Payload, j.Concurrency = nil, 3
	req := store.AdmitRequest{Job: j}
	for _, it := range hardJSON {
		req.Items = append(req.Items, []byte(it))
	}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{req})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, res[0].Admission)
	p := res[0].Job

	for i, want := range hardJSON {
		c := get(t, s, contracts.ChildID(p.ID, i))
		requireBytes(t, fmt.Sprintf("get child %d", i), want, c.Payload)
	}
	listed := children(t, s, p.ID, "")
	require.Len(t, listed, len(hardJSON))
	for i, c := range listed {
		requireBytes(t, fmt.Sprintf("list child %d", i), hardJSON[*c.Index], c.Payload)
	}
	// Every child, released or held, reaches a claim with its item.
	now := at(time.Second)
	for range len(hardJSON) {
		got := claimN(t, s, 10, now)
		require.NotEmpty(t, got)
		for _, c := range got {
			requireBytes(t, fmt.Sprintf("claim child %d", *c.Index), hardJSON[*c.Index], c.Payload)
			finishChild(t, s, c, contracts.StateSucceeded, now)
		}
		now = now.Add(time.Second)
		if get(t, s, p.ID).State.Final() {
			break
		}
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, p.ID).State)
}

// testPayloadExact: a plain job's payload is kept byte for byte, whether
// admitted alone or in a batch (one statement of many rows, and rows
// sharing their payload).
func testPayloadExact(t *testing.T, s store.Store) {
	want := map[string]string{}
	for i, pl := range hardJSON {
		j := admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{},
			func(j *contracts.Job) { j.Payload = []byte(pl) })
		want[j.ID] = pl
		requireBytes(t, "admit", pl, j.Payload)
	}
	var reqs []store.AdmitRequest
	for i, pl := range hardJSON {
		j := NewJob("globex", at(time.Second+time.Duration(i)*time.Millisecond))
		j.Payload = []byte(pl)
		reqs = append(reqs, store.AdmitRequest{Job: j})
	}
	for i := range 20 { // enough rows of one payload to bind it once
		j := NewJob("initech", at(2*time.Second+time.Duration(i)*time.Millisecond))
		j.Payload = []byte(hardJSON[0])
		reqs = append(reqs, store.AdmitRequest{Job: j})
	}
	res, err := s.AdmitBatch(t.Context(), reqs)
	require.NoError(t, err)
	for i, r := range res {
		require.Equal(t, store.Admitted, r.Admission)
		want[r.Job.ID] = string(reqs[i].Job.Payload)
		requireBytes(t, "admit batch", want[r.Job.ID], r.Job.Payload)
	}

	for id, pl := range want {
		requireBytes(t, "get "+id, pl, get(t, s, id).Payload)
	}
	all, _ := listAll(t, s, store.Query{Limit: 7})
	require.Len(t, all, len(want))
	for _, j := range all {
		requireBytes(t, "list "+j.ID, want[j.ID], j.Payload)
	}
	claimed := claimN(t, s, len(want), at(time.Hour))
	require.Len(t, claimed, len(want))
	for _, j := range claimed {
		requireBytes(t, "claim "+j.ID, want[j.ID], j.Payload)
	}
}
