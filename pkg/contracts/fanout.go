package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Fan-out: one submitted job (the parent) over many items, each run as a
// child job of the same kind, tenant and priority whose payload is the
// item, at most Concurrency children at once (the window).
//
// Admission counts a parent, not its children: a parent holds
// Slots() = min(concurrency, items) admission slots from admission until
// it ends, and its children hold none. Since at most that many children
// run at once, the caps still bound the work that runs.

// Bounds of a fan-out.
const (
	// MaxItems bounds the items of one fan-out.
	MaxItems = 100_000
	// MaxWindow bounds a fan-out's concurrency.
	MaxWindow = 1000
	// DefaultWindow is a fan-out's concurrency when the request gives none.
	DefaultWindow = 10
	// MaxFailedChildren bounds the failed children a parent's result names.
	MaxFailedChildren = 100
)

// ChildCounts are a parent's children by state.
type ChildCounts struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// Finished is how many children ended.
func (c ChildCounts) Finished() int { return c.Succeeded + c.Failed + c.Cancelled }

// Done reports whether every child ended.
func (c ChildCounts) Done() bool { return c.Total > 0 && c.Finished() >= c.Total }

// Add counts one more child that ended in state st.
func (c *ChildCounts) Add(st JobState) {
	switch st {
	case StateSucceeded:
		c.Succeeded++
	case StateFailed:
		c.Failed++
	case StateCancelled:
		c.Cancelled++
	}
}

// Progress is the parent's progress: children finished of the total.
func (c ChildCounts) Progress() *Progress {
	if c.Total == 0 {
		return nil
	}
	return &Progress{
		Percent: RoundPercent(100 * float64(c.Finished()) / float64(c.Total)),
		Stage:   "children",
		Message: fmt.Sprintf("%d of %d children finished", c.Finished(), c.Total),
	}
}

// FanoutResult is a finished parent's result: its children's counts and
// the ids of the first MaxFailedChildren failed children, by index. The
// children keep their own results.
type FanoutResult struct {
	Children ChildCounts `json:"children"`
	Failed   []string    `json:"failed,omitempty"`
}

// IsParent reports whether the job is a fan-out parent.
func (j Job) IsParent() bool { return j.Concurrency > 0 }

// IsChild reports whether the job is a child of a fan-out.
func (j Job) IsChild() bool { return j.Parent != "" }

// Slots is how many admission slots the job holds while it is active: 1
// for a plain job, min(concurrency, items) for a parent, none for a child
// (its parent holds them).
func (j Job) Slots() int {
	switch {
	case j.IsChild():
		return 0
	case j.IsParent() && j.Children != nil:
		return ParentSlots(j.Concurrency, j.Children.Total)
	}
	return 1
}

// HeldItems is how many items the job holds in its tenant's count of
// items in flight (SLUICE_GATEWAY_TENANT_MAX_ITEMS) while it is active: 1 for a
// plain job, 1 plus its items for a fan-out parent (held until the parent
// ends, whatever its children did), none for a child (its parent holds
// it). It is JobItems of what was submitted.
func (j Job) HeldItems() int {
	switch {
	case j.IsChild():
		return 0
	case j.IsParent() && j.Children != nil:
		return JobItems(j.Children.Total)
	}
	return 1
}

// ParentSlots is the admission slots of a parent with that window over
// that many items: min(window, items), at least one.
func ParentSlots(window, items int) int { return max(min(window, items), 1) }

// ParentFinalState is the state a parent ends in once every child ended:
// cancelled when a user cancelled it, failed when a child failed (or was
// cancelled by fail_fast), succeeded otherwise.
func ParentFinalState(c ChildCounts, cancelRequested bool) JobState {
	switch {
	case cancelRequested:
		return StateCancelled
	case c.Failed > 0 || c.Cancelled > 0:
		return StateFailed
	}
	return StateSucceeded
}

// ParentError is the error of a parent that did not succeed.
func ParentError(c ChildCounts, cancelRequested bool) string {
	switch {
	case cancelRequested:
		return CancelledByRequest
	case c.Failed > 0:
		return JobError(ClassHandler, fmt.Sprintf("%d of %d children failed", c.Failed, c.Total))
	case c.Cancelled > 0:
		return JobError(ClassCancelled, fmt.Sprintf("%d of %d children were cancelled", c.Cancelled, c.Total))
	}
	return ""
}

// ChildID is the id of a parent's child at index: the parent's id and the
// index, zero-padded so that the children sort in index order.
func ChildID(parent string, index int) string {
	return fmt.Sprintf("%s-%06d", parent, index)
}

// Child is the child of parent at index, running item: same kind, tenant,
// priority, attempts, delay, concurrency key, limits, inputs and resource
// request, with the item as payload,
// no dedup key and the parent's times.
func (j Job) Child(index int, item json.RawMessage) Job {
	i := index
	c := Job{
		ID:               ChildID(j.ID, index),
		Tenant:           j.Tenant,
		Kind:             j.Kind,
		Payload:          item,
		Priority:         j.Priority,
		State:            StatePending,
		MaxAttempts:      j.MaxAttempts,
		RunAt:            j.RunAt,
		ConcurrencyKey:   j.ConcurrencyKey,
		ConcurrencyLimit: j.ConcurrencyLimit,
		RunLimits:        j.RunLimits,
		Inputs:           j.Inputs,
		Resources:        j.Resources,
		Parent:           j.ID,
		Index:            &i,
		CreatedAt:        j.CreatedAt,
		UpdatedAt:        j.UpdatedAt,
		NextDispatchAt:   j.NextDispatchAt,
		DispatchDeadline: j.DispatchDeadline,
	}
	return c
}

// SplitItems reads a fan-out's items: a JSON array of 1 to MaxItems
// values, each returned as its own JSON document, a compact copy (see
// CompactPayload). Its errors are *FieldError; one about a single item
// names it by index ("items[3]").
func SplitItems(raw json.RawMessage) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var items []json.RawMessage
	if err := dec.Decode(&items); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &FieldError{"items", "must be a JSON array"}
		}
		return nil, &FieldError{"items", "is not valid JSON"}
	}
	switch {
	case items == nil:
		return nil, &FieldError{"items", "must be a JSON array"}
	case len(items) == 0:
		return nil, &FieldError{"items", "is empty"}
	case len(items) > MaxItems:
		return nil, &FieldError{"items", fmt.Sprintf("has %d items, at most %d", len(items), MaxItems)}
	}
	for i := range items {
		it, err := CompactPayload(items[i])
		if err != nil {
			return nil, &FieldError{fmt.Sprintf("items[%d]", i), err.Error()}
		}
		items[i] = it
	}
	return items, nil
}
