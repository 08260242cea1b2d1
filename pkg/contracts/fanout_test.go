package contracts

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// checker is a few assertions for this package's tests, which use only
// the standard library.
type checker struct{ t *testing.T }

func (c checker) Equal(want, got any, msg ...any) {
	c.t.Helper()
	if !reflect.DeepEqual(want, got) {
		c.t.Fatalf("want %v, got %v %s", want, got, fmt.Sprint(msg...))
	}
}
func (c checker) True(ok bool, msg ...any) {
	c.t.Helper()
	if !ok {
		c.t.Fatalf("want true %s", fmt.Sprint(msg...))
	}
}
func (c checker) False(ok bool, msg ...any)    { c.t.Helper(); c.True(!ok, msg...) }
func (c checker) Nil(v *Progress, msg ...any)  { c.t.Helper(); c.True(v == nil, msg...) }
func (c checker) Empty(s string, msg ...any)   { c.t.Helper(); c.Equal("", s, msg...) }
func (c checker) Zero(n int, msg ...any)       { c.t.Helper(); c.Equal(0, n, msg...) }
func (c checker) Less(a, b string, msg ...any) { c.t.Helper(); c.True(a < b, msg...) }
func (c checker) Contains(s, sub string, msg ...any) {
	c.t.Helper()
	c.True(strings.Contains(s, sub), s, " lacks ", sub)
}

func TestChildCounts(t *testing.T) {
	t.Parallel()
	check := checker{t}
	c := ChildCounts{Total: 4, Pending: 4}
	check.False(c.Done())
	for _, st := range []JobState{StateSucceeded, StateFailed, StateCancelled, StateRunning} {
		c.Add(st)
	}
	check.Equal(3, c.Finished())
	check.Equal(75.0, c.Progress().Percent)
	c.Add(StateSucceeded)
	check.True(c.Done())
	check.Nil(ChildCounts{}.Progress())
	check.False(ChildCounts{}.Done())
}

func TestParentFinalState(t *testing.T) {
	t.Parallel()
	check := checker{t}
	for _, tc := range []struct {
		c      ChildCounts
		cancel bool
		want   JobState
		errIn  string
	}{
		{ChildCounts{Total: 2, Succeeded: 2}, false, StateSucceeded, ""},
		{ChildCounts{Total: 2, Succeeded: 1, Failed: 1}, false, StateFailed, "1 of 2 children failed"},
		{ChildCounts{Total: 2, Failed: 1, Cancelled: 1}, false, StateFailed, "1 of 2 children failed"},
		{ChildCounts{Total: 2, Succeeded: 1, Cancelled: 1}, false, StateFailed, "1 of 2 children were cancelled"},
		{ChildCounts{Total: 2, Succeeded: 1, Cancelled: 1}, true, StateCancelled, "cancelled by request"},
	} {
		check.Equal(tc.want, ParentFinalState(tc.c, tc.cancel), tc)
		if tc.errIn == "" {
			check.Empty(ParentError(tc.c, tc.cancel))
		} else {
			check.Contains(ParentError(tc.c, tc.cancel), tc.errIn)
		}
	}
}

func TestChildrenOfAParent(t *testing.T) {
	t.Parallel()
	check := checker{t}
	p := Job{ID: "p1", Tenant: "acme", Kind: "k", Priority: 7, MaxAttempts: 4, Key: "dedup", Concurrency: 3,
		ConcurrencyKey: "db", ConcurrencyLimit: 2, Children: &ChildCounts{Total: 12}}
	c := p.Child(11, json.RawMessage(`{"x":1}`))
	check.Equal("p1-000011", c.ID)
	check.Less(ChildID("p1", 9), ChildID("p1", 10), "children sort in index order")
	check.Equal("p1", c.Parent)
	check.Equal(11, *c.Index)
	check.Empty(c.Key, "children have no dedup key")
	check.Zero(c.Concurrency)
	check.Equal(7, c.Priority)
	check.Equal("db", c.ConcurrencyKey)
	check.Equal(0, c.Slots())
	check.Equal(3, p.Slots())
	check.Equal(1, Job{}.Slots())
	p.Children.Total = 2
	check.Equal(2, p.Slots(), "fewer items than the window")
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	check := checker{t}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0}, {"v1.2", "1.2.0", 0}, {"1.10.0", "1.9.9", 1}, {"1.2", "1.2.1", -1},
		{"2.0.0-rc1", "2.0.0", 0}, {"dev", "0.1.0", -1}, {"", "0", 0}, {"1.2.3+abc", "1.2.4", -1},
	} {
		check.Equal(tc.want, CompareVersions(tc.a, tc.b), tc.a, " vs ", tc.b)
	}
}
