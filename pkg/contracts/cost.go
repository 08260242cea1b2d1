package contracts

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The items of a request: what it asks the store to hold. A plain job is
// one item; a fan-out parent is one item plus one per element of its
// "items". A batch is the sum of its jobs. The per-request bound
// (SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST), the per-tenant bound on items in flight
// (SLUICE_GATEWAY_TENANT_MAX_ITEMS) and the per-tenant rate limit all count this.

// JobItems is the items of one job with that many fan-out items.
func JobItems(fanout int) int { return 1 + fanout }

// The roles of the containers CountItems walks through.
const (
	roleOther = iota
	roleBatch // the batch body: its "jobs" array holds the jobs
	roleJobs  // the "jobs" array: each element is a job
	roleJob   // a job: its "items" array holds the fan-out items
	roleItems // a fan-out's "items" array: each element is an item
)

// countFrame is one open object or array of CountItems' walk.
type countFrame struct {
	role    int
	object  bool
	wantKey bool   // an object waiting for its next key
	key     string // an object's key whose value comes next
}

// CountItems counts the items of a submit body (batch false) or of a
// batch body (batch true) without decoding it: one streaming pass over
// its tokens that keeps no job and no item. It stops as soon as the count
// passes limit (limit <= 0: never) and returns what it counted; the count
// is then above limit. A body that is not valid JSON is counted up to its
// first error: decoding it afterwards refuses it. A key given twice counts
// twice, so the count is never below what decoding admits.
func CountItems(data []byte, batch bool, limit int) int {
	if !batch && !mayHaveItems(data) {
		return 1
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers stay text: nothing to parse
	var (
		stack []countFrame
		n     int
	)
	// value starts a value inside the innermost container (or at the top)
	// and returns the role a container opened by it gets.
	value := func() int {
		if len(stack) == 0 {
			if batch {
				return roleBatch
			}
			n++
			return roleJob
		}
		top := &stack[len(stack)-1]
		switch {
		case top.object:
			top.wantKey = true
			switch {
			case top.role == roleBatch && strings.EqualFold(top.key, "jobs"):
				return roleJobs
			case top.role == roleJob && strings.EqualFold(top.key, "items"):
				return roleItems
			}
		case top.role == roleJobs:
			n++
			return roleJob
		case top.role == roleItems:
			n++
		}
		return roleOther
	}
	for limit <= 0 || n <= limit {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if len(stack) > 0 {
			if top := &stack[len(stack)-1]; top.object && top.wantKey {
				if k, ok := tok.(string); ok {
					top.key, top.wantKey = k, false
					continue
				}
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			role := value()
			stack = append(stack, countFrame{role: role, object: tok == json.Delim('{'), wantKey: tok == json.Delim('{')})
		case json.Delim('}'), json.Delim(']'):
			if len(stack) == 0 {
				return n
			}
			stack = stack[:len(stack)-1]
		default:
			value()
		}
	}
	return n
}

// mayHaveItems reports whether a body may hold an "items" key: it has the
// letters "item" in any ASCII case (no other letter folds to one of them),
// or an escape that could spell them. A plain submit without one is one
// item, whatever the size of its payload.
func mayHaveItems(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	for i := 0; i+4 <= len(data); i++ {
		if data[i]|0x20 == 'i' && data[i+1]|0x20 == 't' && data[i+2]|0x20 == 'e' && data[i+3]|0x20 == 'm' {
			return true
		}
	}
	return false
}
