package admission

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// BatchOutcome is the result of a batch submit: either the batch itself
// was refused (Refused, with the reason an HTTP status carries: 400, 413,
// 422, 503), or every job has its own Outcome, in order.
type BatchOutcome struct {
	Refused *Outcome
	Results []Outcome
}

// SubmitBatch runs a batch submit for tenant: body is the raw JSON body,
// already size-checked by the transport. Each job is admitted or refused
// on its own, under the same caps and rules as Submit, and all the
// admissions are one store call (one transaction on the embedded store);
// then the admitted jobs' due messages go out together.
func (a *Admitter) SubmitBatch(ctx context.Context, tenant string, body []byte) BatchOutcome {
	if refused := a.bound(tenant, body, true); refused != nil {
		return BatchOutcome{Refused: refused}
	}
	batch, err := contracts.DecodeBatch(body)
	if err != nil {
		var fe *contracts.FieldError
		o := Fail(http.StatusBadRequest, contracts.CodeInvalidJSON, err.Error())
		if errors.As(err, &fe) {
			o = Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, fe.Error())
		}
		return BatchOutcome{Refused: &o}
	}
	results := make([]Outcome, len(batch.Jobs))
	reqs := make([]store.AdmitRequest, 0, len(batch.Jobs))
	at := make([]int, 0, len(batch.Jobs)) // reqs[k] is job at[k] of the batch
	// The jobs of a batch are submitted at one time: their times then
	// match, which the store also binds once for all of them.
	submitted := a.now().UTC()
	for i, raw := range batch.Jobs {
		req, failed := a.prepare(ctx, tenant, raw, submitted)
		if failed != nil {
			results[i] = prefix(*failed, i)
			continue
		}
		reqs = append(reqs, req)
		at = append(at, i)
	}
	if len(reqs) == 0 {
		return BatchOutcome{Results: results}
	}
	admitted, err := a.store.AdmitBatch(ctx, reqs)
	if err != nil {
		// The store may have admitted the first ones (MongoDB, or the
		// embedded store's first chunks): those are reported, the rest
		// get the 503.
		for k := range reqs {
			results[at[k]] = a.storeDown(reqs[k].Job, err)
		}
	}
	var (
		due   []contracts.Job
		ready bool
		now   = a.now()
	)
	for k, r := range admitted {
		o := a.settle(tenant, r.Job, r.Admission)
		if o.Status == http.StatusAccepted {
			if r.Job.Delayed(now) {
				due = append(due, dueJob(r.Job))
			} else {
				ready = true
			}
		}
		if o.Job != nil {
			// The caller has the payload; leaving it out keeps the reply
			// small. o.Job is settle's own copy of the job: cleared in
			// place, not copied again (a batch holds one of each).
			o.Job.Payload = nil
		}
		results[at[k]] = o
	}
	a.publishDueAll(ctx, due)
	if ready {
		a.wake()
	}
	return BatchOutcome{Results: results}
}

// prefix puts the job's place in the batch before an error message.
func prefix(o Outcome, i int) Outcome {
	if o.Error != nil {
		e := *o.Error
		e.Message = "jobs[" + strconv.Itoa(i) + "]: " + e.Message
		o.Error = &e
	}
	return o
}

// publishDueAll hands delayed jobs' due messages to the schedulers, all
// in flight at once. Failures are only logged and counted, as for one job.
func (a *Admitter) publishDueAll(ctx context.Context, jobs []contracts.Job) {
	if len(jobs) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	msgs := make([]bus.Message, len(jobs))
	for i, j := range jobs {
		msgs[i] = dueOf(j)
	}
	for i, err := range bus.PublishAll(pctx, a.js, msgs) {
		if err != nil {
			a.dueFailed(jobs[i], err)
		}
	}
}
