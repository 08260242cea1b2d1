// Package stale merges the answers of a store driver's stale queries for
// store.Store.Stale.
package stale

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Set merges the answers of a driver's separate stale queries (quiet
// heartbeat, over max runtime, lost pending): a job found twice is kept
// once, at the earliest time that made it stale, and Jobs returns the
// oldest first. The zero value is ready to use.
type Set struct {
	byID map[string]*staleEntry
}

type staleEntry struct {
	job   contracts.Job
	since time.Time
}

// Add records a job found stale since the given time.
func (s *Set) Add(j contracts.Job, since time.Time) {
	if s.byID == nil {
		s.byID = map[string]*staleEntry{}
	}
	if e, ok := s.byID[j.ID]; ok {
		if since.Before(e.since) {
			e.since = since
		}
		return
	}
	s.byID[j.ID] = &staleEntry{job: j, since: since}
}

// Jobs returns at most limit jobs, stalest first (ties by id).
func (s *Set) Jobs(limit int) []contracts.Job {
	all := make([]*staleEntry, 0, len(s.byID))
	for _, e := range s.byID {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].since.Equal(all[j].since) {
			return all[i].since.Before(all[j].since)
		}
		return all[i].job.ID < all[j].job.ID
	})
	if len(all) > limit {
		all = all[:limit]
	}
	out := make([]contracts.Job, len(all))
	for i, e := range all {
		out[i] = e.job
	}
	return out
}
