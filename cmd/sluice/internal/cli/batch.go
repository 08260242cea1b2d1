package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// maxBatchLine bounds one line of a --batch file.
const maxBatchLine = 16 << 20

// maxBatchBytes bounds the body of one batch request: the gateway's
// default SLUICE_GATEWAY_MAX_BATCH_BYTES. A gateway configured lower answers 413
// and the chunk goes again in two halves.
const maxBatchBytes = 1 << 20

// batchEnvelope is what a batch body holds besides its jobs and the commas
// between them: {"jobs":[ and ]}.
const batchEnvelope = len(`{"jobs":[]}`)

// batchLine is one submit body of a --batch file, where it came from (its
// line number, 1-based as editors and grep -n count) and its size in a
// batch body.
type batchLine struct {
	n    int
	req  contracts.SubmitRequest
	size int
}

// SubmitBatch posts up to contracts.MaxBatchJobs jobs at once. Its error is
// pkg/client's, for the caller to turn into the CLI's.
func (c *Client) SubmitBatch(ctx context.Context, reqs []contracts.SubmitRequest) ([]client.BatchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return c.api.SubmitBatch(ctx, reqs)
}

// runSubmitBatch is "submit --batch FILE": every line of FILE ("-" =
// stdin) that is not blank or a # comment is a submit body. They go in
// requests of up to contracts.MaxBatchJobs jobs and maxBatchBytes bytes.
// It prints one line per job, in the file's order: the id of an admitted
// or joined job, or "refused: line N: " and the reason, on stdout (with
// --json, each job's result as a JSON line). Lines are numbered from 1,
// as in the file; the gateway's 0-based place of the job in its request
// ("jobs[i]: ") is replaced by the line it came from.
func runSubmitBatch(ctx context.Context, inv *invocation, path string) (int, error) {
	lines, err := readBatchFile(path, inv.env.Stdin)
	if err != nil {
		return 0, err
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	code, refused := ExitOK, 0
	queue := batchChunks(lines, maxBatchBytes)
	for len(queue) > 0 {
		chunk := queue[0]
		queue = queue[1:]
		reqs := make([]contracts.SubmitRequest, len(chunk))
		for i, l := range chunk {
			reqs[i] = l.req
		}
		results, err := c.SubmitBatch(ctx, reqs)
		var ce *client.Error
		switch {
		case errors.As(err, &ce) && ce.Status == http.StatusRequestEntityTooLarge && len(chunk) > 1:
			// The gateway takes less than maxBatchBytes: halve the chunk.
			half := len(chunk) / 2
			queue = append([][]batchLine{chunk[:half], chunk[half:]}, queue...)
			continue
		case errors.As(err, &ce) && ce.Status == http.StatusRequestEntityTooLarge:
			results = []client.BatchResult{{Status: ce.Status, Err: ce}} // one job over the limit
		case err != nil:
			return 0, fmt.Errorf("lines %d-%d: %w", chunk[0].n, chunk[len(chunk)-1].n, cliError(err))
		}
		for i, r := range results {
			r.Err = lineError(r.Err, i, chunk[i].n)
			code = max(code, batchCode(r))
			if r.Err != nil {
				refused++
			}
			writeBatchResult(inv, chunk[i].n, r)
		}
	}
	if refused > 0 && !inv.g.json {
		fmt.Fprintf(inv.env.Stderr, "sluice submit: %d of %d jobs refused (the lines starting \"refused:\")\n", refused, len(lines))
	}
	return code, nil
}

// batchChunks splits the lines into requests of at most
// contracts.MaxBatchJobs jobs and maxBytes bytes of body (a line larger
// than that alone goes in a request of its own).
func batchChunks(lines []batchLine, maxBytes int) [][]batchLine {
	var out [][]batchLine
	start, size := 0, batchEnvelope
	for i, l := range lines {
		grown := size + l.size
		if i > start {
			grown++ // the comma
		}
		if i > start && (i-start == contracts.MaxBatchJobs || grown > maxBytes) {
			out = append(out, lines[start:i])
			start, grown = i, batchEnvelope+l.size
		}
		size = grown
	}
	return append(out, lines[start:])
}

// lineError is a refused job's error with the gateway's "jobs[i]: "
// (its 0-based place in the request) replaced by its line in the file.
func lineError(err error, i, line int) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	e := *ce
	e.Message = fmt.Sprintf("line %d: %s", line, strings.TrimPrefix(e.Message, fmt.Sprintf("jobs[%d]: ", i)))
	return &e
}

// batchCode is the exit code one job's result calls for: 4 for a 429, 1
// for any other refusal; the worst of them is the command's.
func batchCode(r client.BatchResult) int {
	switch {
	case r.Err == nil:
		return ExitOK
	case r.Status == http.StatusTooManyRequests:
		return ExitRejected
	}
	return ExitFailed
}

// writeBatchResult prints one job's result: one line on stdout, whatever
// the outcome, so that the output lines up with the jobs of the file.
func writeBatchResult(inv *invocation, line int, r client.BatchResult) {
	if inv.g.json {
		reply := contracts.SubmitReply{Status: r.Status}
		if r.Job.ID != "" {
			j := r.Job
			reply.Job = &j
		}
		var ce *client.Error
		if errors.As(r.Err, &ce) {
			reply.Error = &contracts.ErrorDetail{Code: ce.Code, Message: ce.Message, Limit: ce.Limit}
			reply.RetryAfterMS = ce.RetryAfter.Milliseconds()
		}
		data, err := json.Marshal(reply)
		if err == nil {
			inv.writeJSON(data)
		}
		return
	}
	switch {
	case r.Err != nil:
		// The message starts with "line N: " (lineError).
		fmt.Fprintf(inv.env.Stdout, "refused: %s\n", strings.TrimPrefix(cliError(r.Err).Error(), "sluice: "))
	case !r.Created():
		fmt.Fprintf(inv.env.Stdout, "%s\n", r.Job.ID)
		fmt.Fprintf(inv.env.Stderr, "sluice submit: line %d: an active job with key %q exists already: %s\n", line, sanitize(r.Job.Key), r.Job.ID)
	default:
		fmt.Fprintf(inv.env.Stdout, "%s\n", r.Job.ID)
	}
}

// readBatchFile reads the submit bodies of a --batch file. A line that is
// not a submit body is a usage error naming the line.
func readBatchFile(path string, stdin io.Reader) ([]batchLine, error) {
	var rd io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--batch: %v", err)}
		}
		defer f.Close()
		rd = f
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	var out []batchLine
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		req, err := contracts.DecodeSubmit([]byte(text))
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--batch: line %d: %v", n, err)}
		}
		body, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("--batch: line %d: encode: %w", n, err)
		}
		out = append(out, batchLine{n: n, req: req, size: len(body)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the batch: %w", err)
	}
	if len(out) == 0 {
		return nil, &usageError{"--batch: no jobs in the file"}
	}
	return out, nil
}
