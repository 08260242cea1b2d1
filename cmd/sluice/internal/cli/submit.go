package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// maxPayloadInput bounds a payload read from stdin or a file (the server's
// own limit is lower: SLUICE_GATEWAY_MAX_BODY_BYTES).
const maxPayloadInput = 64 << 20

var cmdSubmit = &command{
	name:    "submit",
	summary: "submit a job; --wait follows it to its end",
	usage:   "submit (<kind> [--payload JSON|-|@FILE | --items JSON|-|@FILE [--concurrency N] [--fail-fast]] [--key KEY] [--priority N] [--run-at T] [--deadline D] [--max-attempts N] [--concurrency-key K --concurrency-limit N] [--stall-timeout D] [--max-runtime D] [--cpu N] [--memory AMOUNT | --resources cpu=N,memory=AMOUNT] [--input NAME=URI@SHA256]... [--wait] | --batch FILE.jsonl) [--json]",
	help: `
Submits a job of the given kind and prints its id. With --json it prints the
job as the API returns it.

--payload takes the job's JSON payload inline, from stdin ("-") or from a
file ("@path"). --key makes the submit idempotent: while a job with the same
key is active, submitting again returns that job (a note on stderr says so).
--priority orders waiting jobs (higher first). --run-at delays the job: a Go
duration from now ("30s") or an RFC 3339 time. --deadline is how long the job
may wait for a worker after that: a Go duration ("90s") or an RFC 3339 time.
A failed run runs again after a backoff until --max-attempts runs.
--concurrency-key with --concurrency-limit lets at most that many of your
jobs with that key run at once; the others wait. --stall-timeout stops a
run that reports no progress for that long (an exec job's line of output
counts), --max-runtime one that runs longer: both fail timeout: and are
retried like a handler failure. --cpu (cores, 0.5 is half a core) and
--memory (512MiB, 1.5GiB: IEC units) say what the job needs of a worker,
or both at once --resources cpu=0.5,memory=512MiB; what is left out takes
the worker's default for the kind (see docs/resources.md). An exec job's
process tree is held to it. --input name=uri@sha256 (repeatable) pins a
file the run needs: the worker fetches and checks it and gives exec its
path in SLUICE_INPUT_<NAME>; "@pin" on a file:// makes the gateway hash it.

--items makes a fan-out: one child job per item, the item as its payload,
at most --concurrency (default 10) running at once. It takes a JSON array
or JSON Lines (one item per line), inline, from stdin ("-") or from a file
("@items.jsonl"). The parent fails at the end when a child failed, or at
the first failure with --fail-fast (the rest are cancelled); --wait shows
one progress bar for the whole fan-out.

--batch FILE submits every line of FILE ("-" = stdin) as a job: each line is
a submit body ({"kind":"sleep","payload":{"ms":5}}); blank lines and lines
starting with # are skipped. They are sent up to 1,000 jobs and 1 MiB to a
request. It prints one line per job, in the file's order: the job's id, or
"refused: line N: " and the reason (lines counted from 1, blank and comment
lines included); the exit code is 4 if any was shed (429), 1 if any was
refused otherwise.

--wait then follows the job until it ends: a live progress bar on a
terminal, a line per change otherwise; with --json only the final job is
printed. The exit code is then the job's outcome.

exit codes: 0 submitted (with --wait: succeeded), 1 failed or server error,
2 usage, 3 cancelled (with --wait), 4 rejected at admission (429), 130
interrupted while waiting (the job goes on).`,
	run: runSubmit,
}

func runSubmit(ctx context.Context, inv *invocation, args []string) (int, error) {
	fs := inv.flagSet()
	payload := fs.String("payload", "", "the job's `JSON` payload; \"-\" reads stdin, \"@file\" reads a file")
	key := fs.String("key", "", "idempotency `key`: an active job with the same key is returned instead")
	priority := fs.Int("priority", 0, fmt.Sprintf("priority, %d to %d (higher first)", contracts.MinPriority, contracts.MaxPriority))
	deadline := fs.String("deadline", "", "how long the job may wait for a worker: a `duration` (90s) or an RFC 3339 time")
	maxAttempts := fs.Int("max-attempts", 0, "how many times the job may run before a failure is final (default: the server's)")
	runAt := fs.String("run-at", "", "not before: a `duration` from now (30s) or an RFC 3339 time")
	concKey := fs.String("concurrency-key", "", "with --concurrency-limit: a `key` whose jobs run at most N at once")
	concLimit := fs.Int("concurrency-limit", 0, "how many jobs of --concurrency-key may run at once")
	cpu := fs.String("cpu", "", "the `cores` the job needs (0.5 is half a core)")
	memory := fs.String("memory", "", "the memory the job needs: an `amount` with an IEC unit (512MiB, 1.5GiB)")
	resources := fs.String("resources", "", "what the job needs as `cpu=N,memory=AMOUNT` (either may be left out)")
	var inputs inputFlags
	fs.Var(&inputs, "input", "a pinned input `name=uri@sha256` (sha256 \"pin\" on a file:// asks the gateway to hash it); repeatable")
	stall := fs.String("stall-timeout", "", "stop a run that reports no progress for this `duration` (default: the server's)")
	maxRun := fs.String("max-runtime", "", "stop a run that takes longer than this `duration`")
	items := fs.String("items", "", "fan-out `items`: a JSON array or JSON Lines; \"-\" reads stdin, \"@file\" reads a file")
	window := fs.Int("concurrency", 0, "with --items: how many children run at once (default: the server's, 10)")
	failFast := fs.Bool("fail-fast", false, "with --items: cancel the rest at the first failed child")
	wait := fs.Bool("wait", false, "follow the job until it ends; exit with its outcome")
	batch := fs.String("batch", "", "submit every line of `FILE` (JSON Lines of submit bodies; \"-\" = stdin)")
	if hasFlag(args, "batch") {
		if _, err := inv.parse(fs, args, 0, 0); err != nil {
			return 0, err
		}
		if *wait {
			return 0, &usageError{"--wait does not go with --batch"}
		}
		return runSubmitBatch(ctx, inv, *batch)
	}
	pos, err := inv.parse(fs, args, 1, 1)
	if err != nil {
		return 0, err
	}
	req := contracts.SubmitRequest{Kind: pos[0], Key: *key, Priority: *priority, Deadline: *deadline, MaxAttempts: *maxAttempts,
		RunAt: *runAt, ConcurrencyKey: *concKey, ConcurrencyLimit: *concLimit, StallTimeout: *stall, MaxRuntime: *maxRun,
		Inputs: inputs}
	if req.Resources, err = readResources(*resources, *cpu, *memory); err != nil {
		return 0, err
	}
	if req.Payload, err = readPayload(*payload, inv.env.Stdin); err != nil {
		return 0, err
	}
	if req.Items, err = readItems(*items, inv.env.Stdin); err != nil {
		return 0, err
	}
	switch {
	case req.Items == nil && (*window != 0 || *failFast):
		return 0, &usageError{"--concurrency and --fail-fast need --items"}
	case req.Items != nil && req.Payload != nil:
		return 0, &usageError{"--payload and --items do not go together: each item is a child's payload"}
	}
	req.Concurrency, req.FailFast = *window, *failFast
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	job, raw, created, err := c.Submit(ctx, req)
	if err != nil {
		return 0, err
	}
	if !created {
		fmt.Fprintf(inv.env.Stderr, "sluice submit: an active job with key %q exists already: %s (%s)\n", sanitize(job.Key), job.ID, job.State)
	}
	if !*wait {
		if inv.g.json {
			inv.writeJSON(raw)
		} else {
			fmt.Fprintln(inv.env.Stdout, job.ID)
		}
		return ExitOK, nil
	}
	if !inv.g.json {
		fmt.Fprintln(inv.env.Stdout, job.ID)
	}
	return followJob(ctx, inv, job.ID, false)
}

// inputFlags are the --input values: name=uri@sha256 each.
type inputFlags []contracts.InputRef

// String implements flag.Value.
func (f *inputFlags) String() string { return fmt.Sprint(len(*f), " inputs") }

// Set reads one name=uri@sha256 (the digest after the last '@').
func (f *inputFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 || name == "" {
		return fmt.Errorf("want name=uri@sha256, got %q", v)
	}
	*f = append(*f, contracts.InputRef{Name: name, URI: rest[:at], SHA256: rest[at+1:]})
	return nil
}

// readResources reads --resources, --cpu and --memory as one declaration
// in the form contracts.ParseResources reads (a member given twice is an
// error), and returns it as the submit's JSON; nil when none is given.
func readResources(spec, cpu, memory string) (json.RawMessage, error) {
	parts := []string{}
	if spec != "" {
		parts = append(parts, spec)
	}
	if cpu != "" {
		parts = append(parts, "cpu="+cpu)
	}
	if memory != "" {
		parts = append(parts, "memory="+memory)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	r, err := contracts.ParseResources(strings.Join(parts, ","))
	if err != nil {
		return nil, &usageError{"--resources/--cpu/--memory: " + err.Error()}
	}
	if r.IsZero() {
		return nil, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode resources: %w", err)
	}
	return data, nil
}

// readItems reads the --items value as readPayload reads --payload: a JSON
// array as it is, or JSON Lines (one item a line, blank lines skipped)
// made into one.
func readItems(v string, stdin io.Reader) (json.RawMessage, error) {
	data, from, err := readInput("--items", v, stdin)
	if data == nil || err != nil {
		return nil, err
	}
	if data[0] == '[' {
		if !json.Valid(data) {
			return nil, &usageError{from + " is not a valid JSON array"}
		}
		return json.RawMessage(data), nil
	}
	var b strings.Builder
	b.WriteByte('[')
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !json.Valid([]byte(line)) {
			return nil, &usageError{fmt.Sprintf("%s: line %d is not valid JSON", from, i+1)}
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(line)
		n++
	}
	b.WriteByte(']')
	return json.RawMessage(b.String()), nil
}

// readPayload reads the --payload value: inline JSON, "-" for stdin or
// "@path" for a file. Empty means no payload. Input that is not JSON is a
// usage error.
func readPayload(v string, stdin io.Reader) (json.RawMessage, error) {
	data, from, err := readInput("--payload", v, stdin)
	if data == nil || err != nil {
		return nil, err
	}
	if !json.Valid(data) {
		return nil, &usageError{from + " is not valid JSON"}
	}
	return json.RawMessage(data), nil
}

// readInput reads a flag's value: inline, "-" for stdin or "@path" for a
// file, trimmed; nil when the flag is empty. It also says where the value
// came from, for messages.
func readInput(flag, v string, stdin io.Reader) ([]byte, string, error) {
	var (
		data []byte
		err  error
		from = flag
		what = strings.TrimPrefix(flag, "--")
	)
	switch {
	case v == "":
		return nil, from, nil
	case v == "-":
		from = "the " + what + " on stdin"
		data, err = io.ReadAll(io.LimitReader(stdin, maxPayloadInput+1))
		if err != nil {
			return nil, from, fmt.Errorf("read the %s from stdin: %w", what, err)
		}
	case strings.HasPrefix(v, "@"):
		from = "the " + what + " in " + v[1:]
		f, err := os.Open(v[1:])
		if err != nil {
			return nil, from, &usageError{fmt.Sprintf("%s: %v", flag, err)}
		}
		defer f.Close()
		if data, err = io.ReadAll(io.LimitReader(f, maxPayloadInput+1)); err != nil {
			return nil, from, fmt.Errorf("read the %s from %s: %w", what, v[1:], err)
		}
	default:
		data = []byte(v)
	}
	if len(data) > maxPayloadInput {
		return nil, from, &usageError{fmt.Sprintf("%s is larger than %d MiB", from, maxPayloadInput>>20)}
	}
	data = []byte(strings.TrimSpace(string(data)))
	if len(data) == 0 {
		return nil, from, &usageError{from + " is empty"}
	}
	return data, from, nil
}

// followJob follows job id to its end with the display inv calls for and
// returns the exit code of its outcome. With --json and jsonLines false,
// the final job is printed on stdout.
func followJob(ctx context.Context, inv *invocation, id string, jsonLines bool) (int, error) {
	c, err := inv.client()
	if err != nil {
		return 0, err
	}
	d := inv.newDisplay(jsonLines)
	f := newFollower(c, d.update)
	f.onNote = d.note
	job, raw, err := f.follow(ctx, id)
	if err != nil {
		d.stop()
		if ctx.Err() != nil {
			fmt.Fprintf(inv.env.Stderr, "sluice %s: stopped following %s; the job goes on (sluice watch %s)\n", inv.cmd.name, id, id)
		}
		return 0, err
	}
	d.finish(job)
	if inv.g.json && !jsonLines {
		if raw == nil {
			raw, _ = json.Marshal(job)
		}
		inv.writeJSON(raw)
	}
	return outcomeCode(job.State), nil
}

// hasFlag reports whether args set the flag name ("-name",
// "--name", "--name=…").
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
