package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestHandlerOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handlers := map[string]worker.Handler{
		"fail": func(context.Context, worker.Job) (worker.Result, error) {
			return nil, errors.New("boom")
		},
		"input": func(context.Context, worker.Job) (worker.Result, error) {
			return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: errors.New("bad width")}
		},
		"panic": func(context.Context, worker.Job) (worker.Result, error) {
			panic("kaboom")
		},
		"partial": func(context.Context, worker.Job) (worker.Result, error) {
			return worker.Result(`{"done":3}`), fmt.Errorf("item 4: %w", errors.New("unreachable"))
		},
		"badjson": func(context.Context, worker.Job) (worker.Result, error) {
			return worker.Result(`{not json`), nil
		},
		"deadline": func(context.Context, worker.Job) (worker.Result, error) {
			return nil, fmt.Errorf("fetch: %w", context.DeadlineExceeded)
		},
		"ok": func(context.Context, worker.Job) (worker.Result, error) {
			return nil, nil
		},
	}
	cfg := testConfig(t, "w-outcomes")
	cfg.MaxConcurrent = 0
	b.start(cfg, handlers)

	tests := []struct {
		kind   string
		state  contracts.JobState
		err    string
		result string
	}{
		{"fail", contracts.StateFailed, "handler: boom", ""},
		{"input", contracts.StateFailed, "input: bad width", ""},
		{"panic", contracts.StateFailed, "handler: panic: kaboom", ""},
		{"partial", contracts.StateFailed, "handler: item 4: unreachable", `{"done":3}`},
		{"badjson", contracts.StateFailed, "handler: result is not valid JSON", ""},
		{"deadline", contracts.StateFailed, "timeout: fetch: context deadline exceeded", ""},
		{"ok", contracts.StateSucceeded, "", ""},
	}
	// One at a time, so each result is read in order.
	for _, tc := range tests {
		reply := b.offer("w-outcomes", spec("job-"+tc.kind, tc.kind, 1, ""))
		require.Equal(t, contracts.OfferAccepted, reply.Status, tc.kind)
		res := b.nextResult()
		require.Equal(t, "job-"+tc.kind, res.JobID)
		require.Equal(t, tc.state, res.State, tc.kind)
		require.Equal(t, tc.err, res.Error, tc.kind)
		if tc.result == "" {
			require.Empty(t, res.Result, tc.kind)
		} else {
			require.JSONEq(t, tc.result, string(res.Result), tc.kind)
		}
	}
	// The worker survived the panic and still takes jobs.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-outcomes", spec("after-panic", "ok", 1, "")).Status)
	require.Equal(t, contracts.StateSucceeded, b.nextResult().State)
}

func TestBuiltinKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := testConfig(t, "w-builtins")
	cfg.MaxConcurrent = 0
	cfg.Kinds = []string{"sleep", "exec"}
	cfg.ExecAllow = []string{"/bin/sh"}
	cfg.ExecGrace = 200 * time.Millisecond
	b.start(cfg, nil)

	tests := []struct {
		name    string
		kind    string
		payload string
		state   contracts.JobState
		err     string
		result  string
	}{
		{"sleep", "sleep", `{"ms":10}`, contracts.StateSucceeded, "", `{"slept_ms":10}`},
		{"sleep without payload", "sleep", "", contracts.StateSucceeded, "", `{"slept_ms":0}`},
		{"sleep bad payload", "sleep", `{"ms":-3}`, contracts.StateFailed, "input: sleep: payload.ms: must be between 0 and 86400000, got -3", ""},
		{"exec output", "exec", `{"argv":["/bin/sh","-c","echo hi"]}`, contracts.StateSucceeded, "", ""},
		{"exec not allowed", "exec", `{"argv":["rm","-rf","/"]}`, contracts.StateFailed, `input: exec: program "rm" is not allowed`, ""},
		{"exec non-zero exit", "exec", `{"argv":["/bin/sh","-c","echo partial; exit 4"]}`, contracts.StateFailed, "handler: exit status 4", ""},
	}
	for i, tc := range tests {
		id := fmt.Sprintf("b%d", i)
		require.Equal(t, contracts.OfferAccepted, b.offer("w-builtins", spec(id, tc.kind, 1, tc.payload)).Status, tc.name)
		res := b.nextResult()
		require.Equal(t, id, res.JobID, tc.name)
		require.Equal(t, tc.state, res.State, tc.name)
		require.Equal(t, tc.err, res.Error, tc.name)
		if tc.result != "" {
			require.JSONEq(t, tc.result, string(res.Result), tc.name)
		}
		if tc.kind == "exec" && tc.name != "exec not allowed" {
			var out struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			}
			require.NoError(t, json.Unmarshal(res.Result, &out), tc.name)
			if tc.state == contracts.StateSucceeded {
				require.Equal(t, 0, out.ExitCode)
				require.Equal(t, "hi\n", out.Stdout)
			} else {
				require.Equal(t, 4, out.ExitCode, "the exit code is in the result")
				require.Equal(t, "partial\n", out.Stdout)
			}
		}
	}
}
