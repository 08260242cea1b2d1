package contracts_test

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestAppendEventIsJSONMarshal checks that the hand-written encoding of an
// event is byte for byte json.Marshal's, and decodes back to the event.
func TestAppendEventIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 6, 1, 2, 345678900, time.UTC)
	for _, tc := range []struct {
		name string
		ev   contracts.Event
	}{
		{"zero", contracts.Event{}},
		{"started", contracts.StateEvent(contracts.Job{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Tenant: "acme", Kind: "sleep",
			State: contracts.StateRunning, Attempt: 1, Claim: 1, Worker: "w-0001", UpdatedAt: at})},
		{"failed child", contracts.StateEvent(contracts.Job{ID: "j-000042", Tenant: "acme.eu", Kind: "exec", Parent: "p1",
			State: contracts.StateFailed, Attempt: 3, Claim: 7, Error: "handler: exit status 1", UpdatedAt: at})},
		{"escapes", contracts.Event{Type: contracts.EventState, JobID: "a\"b\\c", Tenant: "t<&>", Kind: "k\n\t\x01",
			Error: "timeout: \u2028 line \u2029 sep, caf\u00e9, \xff bad utf-8, emoji \U0001F600", At: at}},
		{"progress", contracts.Event{Type: contracts.EventProgress, JobID: "j", Tenant: "t", Attempt: 2, Claim: 2,
			Progress: &contracts.Progress{Percent: 42.5, Stage: "fetch", Message: "<half> & more"}, At: at}},
		{"progress zero", contracts.Event{Type: contracts.EventProgress, JobID: "j", Tenant: "t", Progress: &contracts.Progress{}, At: at}},
		{"zone", contracts.Event{Type: contracts.EventState, JobID: "j", Tenant: "t", At: at.In(time.FixedZone("x", -(3*3600 + 30*60)))}},
		{"whole second", contracts.Event{Type: contracts.EventState, JobID: "j", Tenant: "t", At: time.Date(1999, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{"negative numbers", contracts.Event{Type: contracts.EventState, JobID: "j", Tenant: "t", Attempt: -1, Claim: math.MinInt64, At: at}},
		{"max claim", contracts.Event{Type: contracts.EventState, JobID: "j", Tenant: "t", Attempt: math.MaxInt32, Claim: math.MaxInt64, At: at}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, err := json.Marshal(tc.ev)
			require.NoError(t, err)
			got, err := contracts.AppendEvent([]byte("prefix"), tc.ev)
			require.NoError(t, err)
			require.Equal(t, "prefix"+string(want), string(got))
			var back contracts.Event
			require.NoError(t, json.Unmarshal(got[len("prefix"):], &back))
			var wantBack contracts.Event
			require.NoError(t, json.Unmarshal(want, &wantBack))
			require.Equal(t, wantBack, back)
		})
	}
}

// TestAppendEventFailsAsJSONMarshal checks that what json.Marshal refuses
// is refused too.
func TestAppendEventFailsAsJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, ev := range []contracts.Event{
		{JobID: "j", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{JobID: "j", At: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{JobID: "j", Progress: &contracts.Progress{Percent: math.NaN()}},
	} {
		_, err := json.Marshal(ev)
		require.Error(t, err)
		_, err = contracts.AppendEvent(nil, ev)
		require.Error(t, err)
	}
}

// TestEventSubjectBuckets checks the subject of a job's events against
// its definition: the tenant's token, then FNV-1a of the job id modulo the
// buckets, as two hex digits.
func TestEventSubjectBuckets(t *testing.T) {
	t.Parallel()
	for i := range 2000 {
		for _, tenant := range []string{"acme", "acme.eu.west", ""} {
			id := fmt.Sprintf("0190a1b2-c3d4-7e5f-8a9b-%012d", i)
			h := fnv.New32a()
			_, _ = h.Write([]byte(id))
			want := fmt.Sprintf("sluice.events.%s.%02x", strings.ReplaceAll(tenant, ".", "~"), h.Sum32()%256)
			require.Equal(t, want, contracts.EventSubject(tenant, id))
		}
	}
}

// FuzzAppendEvent checks AppendEvent against json.Marshal on any strings,
// numbers and times.
func FuzzAppendEvent(f *testing.F) {
	f.Add("j1", "acme", "sleep", "", "running", "w-1", "", int64(1), int64(1), int64(1764309662123456789), false, 0.0, "", "")
	f.Add("a\"b", "t<>&", "k\u2028", "p\xff", "failed", "w", "handler: \x00", int64(-3), int64(1<<62), int64(0), true, 99.5, "st", "msg\n")
	f.Fuzz(func(t *testing.T, id, tenant, kind, parent, state, worker, errText string, attempt, claim, at int64,
		progress bool, percent float64, stage, message string) {
		ev := contracts.Event{Type: contracts.EventState, JobID: id, Tenant: tenant, Kind: kind, Parent: parent,
			State: contracts.JobState(state), Attempt: int(int32(attempt)), Claim: claim, Worker: worker, Error: errText,
			At: time.Unix(0, at).UTC()}
		if progress {
			ev.Type = contracts.EventProgress
			ev.Progress = &contracts.Progress{Percent: percent, Stage: stage, Message: message}
		}
		want, werr := json.Marshal(ev)
		got, gerr := contracts.AppendEvent(nil, ev)
		if werr != nil {
			require.Error(t, gerr)
			return
		}
		require.NoError(t, gerr)
		require.Equal(t, string(want), string(got))
	})
}
