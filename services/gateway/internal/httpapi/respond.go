package httpapi

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
)

// writeJSON answers status with v as its JSON body. HTML is not escaped:
// the API answers JSON, never HTML, so "<token>" stays readable instead of
// "\u003ctoken\u003e".
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := contracts.EncodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"code":"` + contracts.CodeInternal + `","message":"cannot encode the response"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// writeError answers status with an ErrorBody.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, contracts.ErrorBody{Error: contracts.ErrorDetail{Code: code, Message: msg}})
}

// writeOutcome answers an admission outcome: the job on 200 and 202, the
// error body otherwise, with Retry-After when the client should wait.
func writeOutcome(w http.ResponseWriter, o admission.Outcome) {
	if o.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(admission.RetryAfterSeconds(o.RetryAfter), 10))
	}
	if o.Error != nil {
		writeJSON(w, o.Status, contracts.ErrorBody{Error: *o.Error})
		return
	}
	if o.Status == http.StatusAccepted && o.Job != nil {
		w.Header().Set("Location", "/v1/jobs/"+o.Job.ID)
	}
	writeJSON(w, o.Status, o.Job)
}

// Messages for the codes with one fixed wording.
const (
	msgUnauthorized = "a valid API token is required: Authorization: Bearer <token>"
	msgNotFound     = "no such job"
	msgUnavailable  = "the job store is unavailable, try again"
)
