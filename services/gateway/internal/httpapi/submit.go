package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
)

// submit is POST /v1/jobs: 415 unless the body is JSON, 413 when it is too
// large, then the shared admission path (400, 422, 429, 503, 200 or 202).
func (a *api) submit(w http.ResponseWriter, r *http.Request, tenant string) {
	body, ok := readJSONBody(w, r, a.MaxBodyBytes)
	if !ok {
		return
	}
	o := a.Admitter.Submit(r.Context(), tenant, body)
	noteCause(r, o.Cause)
	writeOutcome(w, o)
}

// submitBatch is POST /v1/jobs/batch: 415 unless the body is JSON, 413
// when it is over MaxBatchBytes, 400/422 for a body that is not a batch of
// 1 to 1,000 submit bodies; otherwise 200 with one result per job, each
// what a single submit would have answered.
func (a *api) submitBatch(w http.ResponseWriter, r *http.Request, tenant string) {
	limit := a.MaxBatchBytes
	if limit <= 0 {
		limit = a.MaxBodyBytes
	}
	body, ok := readJSONBody(w, r, limit)
	if !ok {
		return
	}
	bo := a.Admitter.SubmitBatch(r.Context(), tenant, body)
	if bo.Refused != nil {
		noteCause(r, bo.Refused.Cause)
		writeOutcome(w, *bo.Refused)
		return
	}
	reply := contracts.BatchReply{Results: make([]contracts.SubmitReply, len(bo.Results))}
	for i, o := range bo.Results {
		if o.Cause != nil {
			noteCause(r, o.Cause)
		}
		reply.Results[i] = o.Reply()
	}
	writeJSON(w, http.StatusOK, reply)
}

// readJSONBody reads a JSON request body of at most limit bytes. When it
// cannot (415 not JSON, 413 too large, 400 unreadable) it answers the
// request itself and reports false.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if !isJSON(r.Header.Values("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, contracts.CodeUnsupportedMedia,
			"Content-Type must be application/json")
		return nil, false
	}
	if r.ContentLength > limit {
		writeOutcome(w, admission.TooLarge(limit))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeOutcome(w, admission.TooLarge(limit))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, contracts.CodeBadRequest, "cannot read the request body")
		return nil, false
	}
	return body, true
}

// isJSON reports whether the Content-Type header (given once) is
// application/json, with no charset or a UTF-8 one.
func isJSON(values []string) bool {
	if len(values) != 1 {
		return false
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != contentTypeJSON {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return false
	}
	return true
}
