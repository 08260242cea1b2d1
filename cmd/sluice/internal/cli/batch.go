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

// batchLine is one submit body of a --batch file and where it came from.
type batchLine struct {
	n   int
	req contracts.SubmitRequest
}

// SubmitBatch posts up to contracts.MaxBatchJobs jobs at once.
func (c *Client) SubmitBatch(ctx context.Context, reqs []contracts.SubmitRequest) ([]client.BatchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	res, err := c.api.SubmitBatch(ctx, reqs)
	return res, cliError(err)
}

// runSubmitBatch is "submit --batch FILE": every non-empty line of FILE
// ("-" = stdin) is a submit body; they go in batches of up to
// contracts.MaxBatchJobs. It prints one line per job, in order: the id of
// an admitted or joined job on stdout, the error of a refused one on
// stderr (with --json, each job's result as a JSON line on stdout).
func runSubmitBatch(ctx context.Context, inv *invocation, path string) (int, error) {
	lines, err := readBatchFile(path, inv.env.Stdin)
	if err != nil {
		return 0, err
	}
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	code := ExitOK
	for start := 0; start < len(lines); start += contracts.MaxBatchJobs {
		chunk := lines[start:min(start+contracts.MaxBatchJobs, len(lines))]
		reqs := make([]contracts.SubmitRequest, len(chunk))
		for i, l := range chunk {
			reqs[i] = l.req
		}
		results, err := c.SubmitBatch(ctx, reqs)
		if err != nil {
			return 0, fmt.Errorf("lines %d-%d: %w", chunk[0].n, chunk[len(chunk)-1].n, err)
		}
		for i, r := range results {
			code = max(code, batchCode(r))
			writeBatchResult(inv, chunk[i].n, r)
		}
	}
	return code, nil
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

// writeBatchResult prints one job's result.
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
		fmt.Fprintf(inv.env.Stderr, "sluice submit: line %d: %s\n", line, strings.TrimPrefix(cliError(r.Err).Error(), "sluice: "))
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
		out = append(out, batchLine{n: n, req: req})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the batch: %w", err)
	}
	if len(out) == 0 {
		return nil, &usageError{"--batch: no jobs in the file"}
	}
	return out, nil
}
