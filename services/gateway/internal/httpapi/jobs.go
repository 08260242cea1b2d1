package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/gateway/internal/cancel"
)

// List page bounds of GET /v1/jobs.
const (
	defaultListLimit = 50
	maxListLimit     = 500
	maxCursorLen     = 512
)

// msgBadID is the answer to a path id that cannot be a job id.
const msgBadID = "job id must be 1-64 letters, digits, '-' or '_'"

// getJob is GET /v1/jobs/{id}: the tenant's job, or 404 for a missing job
// and for another tenant's, indistinguishably.
func (a *api) getJob(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if !contracts.ValidJobID(id) {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, msgBadID)
		return
	}
	job, err := a.Store.Get(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && job.Tenant != tenant:
		writeError(w, http.StatusNotFound, contracts.CodeNotFound, msgNotFound)
	case err != nil:
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

// cancelJob is POST /v1/jobs/{id}/cancel: 202 with the job (cancelled at
// once when pending, cancel_requested when running, as it is when already
// cancelled), 409 when it finished otherwise, 404 when it is not the
// tenant's.
func (a *api) cancelJob(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if !contracts.ValidJobID(id) {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, msgBadID)
		return
	}
	job, err := a.Canceller.Cancel(r.Context(), tenant, id)
	var finished *cancel.FinishedError
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, job)
	case errors.Is(err, cancel.ErrNotFound):
		writeError(w, http.StatusNotFound, contracts.CodeNotFound, msgNotFound)
	case errors.As(err, &finished):
		writeError(w, http.StatusConflict, contracts.CodeConflict, finished.Error())
	case errors.Is(err, cancel.ErrBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "the job kept changing, try again")
	default:
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
	}
}

// listJobs is GET /v1/jobs?state=&kind=&limit=&cursor=: a page of the
// tenant's jobs, newest first.
func (a *api) listJobs(w http.ResponseWriter, r *http.Request, tenant string) {
	q, err := parseListQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, err.Error())
		return
	}
	q.Tenant = tenant
	jobs, next, err := a.Store.List(r.Context(), q)
	switch {
	case errors.Is(err, store.ErrBadCursor):
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, "cursor is not one this server handed out")
		return
	case err != nil:
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
		return
	}
	if jobs == nil {
		jobs = []contracts.Job{}
	}
	writeJSON(w, http.StatusOK, contracts.JobPage{Jobs: jobs, NextCursor: next})
}

// parseListQuery reads and checks the list parameters. Each may appear at
// most once; unknown parameters are ignored. Messages never echo input.
func parseListQuery(raw string) (store.Query, error) {
	q := store.Query{Limit: defaultListLimit}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, errors.New("query string is malformed")
	}
	get := func(name string) (string, error) {
		v := vals[name]
		switch len(v) {
		case 0:
			return "", nil
		case 1:
			return v[0], nil
		}
		return "", fmt.Errorf("%s is given more than once", name)
	}
	if v, err := get("state"); err != nil {
		return q, err
	} else if v != "" {
		st := contracts.JobState(v)
		if !st.Valid() {
			return q, errors.New("state must be one of pending, running, succeeded, failed, cancelled")
		}
		q.State = st
	}
	if v, err := get("kind"); err != nil {
		return q, err
	} else if v != "" {
		if !contracts.ValidKind(v) {
			return q, errors.New("kind must be 1-64 lowercase letters, digits, '_', '.' or '-'")
		}
		q.Kind = v
	}
	if v, err := get("parent"); err != nil {
		return q, err
	} else if v != "" {
		if !contracts.ValidJobID(v) {
			return q, errors.New("parent must be a job id")
		}
		q.Parent = v
	}
	if v, err := get("limit"); err != nil {
		return q, err
	} else if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return q, fmt.Errorf("limit must be a whole number from 1 to %d", maxListLimit)
		}
		q.Limit = n
	}
	if v, err := get("cursor"); err != nil {
		return q, err
	} else if v != "" {
		if len(v) > maxCursorLen {
			return q, errors.New("cursor is not one this server handed out")
		}
		q.Cursor = v
	}
	return q, nil
}
