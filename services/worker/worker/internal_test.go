package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/lease"
)

func TestWorkerID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, suffix, want string
	}{
		{"box", "abc123", "box-abc123"},
		{"web-1.prod.example.com", "abc123", "web-1-prod-example-com-abc123"},
		{"", "abc123", "worker-abc123"},
		{"...", "abc123", "worker-abc123"},
		{"ünïcode", "abc123", "n-code-abc123"},
		{strings.Repeat("h", 100), "abc123", strings.Repeat("h", 57) + "-abc123"},
		{strings.Repeat("h", 56) + ".x", "abc123", strings.Repeat("h", 56) + "-abc123"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			got := workerID(tc.host, tc.suffix)
			require.Equal(t, tc.want, got)
			require.True(t, contracts.ValidWorkerID(got), got)
		})
	}
	require.True(t, contracts.ValidWorkerID(GenerateWorkerID()))
}

func TestDecide(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name                              string
		err                               error
		fenced, cancelRequested, shutdown bool
		want                              verdict
	}{
		{"success", nil, false, false, false, verdict{report: reportResult, state: contracts.StateSucceeded}},
		{"failure", boom, false, false, false, verdict{report: reportResult, state: contracts.StateFailed, err: "handler: boom"}},
		{"fenced failure", boom, true, false, false, verdict{report: reportNothing}},
		{"fenced success", nil, true, false, false, verdict{report: reportNothing}},
		{"fenced while cancelled", boom, true, true, false, verdict{report: reportNothing}},
		{"cancelled", context.Canceled, false, true, false, verdict{report: reportResult, state: contracts.StateCancelled, err: "cancelled: cancelled by request"}},
		{"cancelled yet finished", nil, false, true, false, verdict{report: reportResult, state: contracts.StateSucceeded}},
		{"shutdown", context.Canceled, false, false, true, verdict{report: reportRequeue}},
		{"shutdown yet finished", nil, false, false, true, verdict{report: reportResult, state: contracts.StateSucceeded}},
		{"cancel wins over shutdown", context.Canceled, false, true, true, verdict{report: reportResult, state: contracts.StateCancelled, err: "cancelled: cancelled by request"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, decide(tc.err, tc.fenced, tc.cancelRequested, tc.shutdown))
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("boom"), "handler: boom"},
		{"classed", &contracts.ClassedError{Class: contracts.ClassInput, Err: errors.New("bad")}, "input: bad"},
		{"wrapped classed", fmt.Errorf("step: %w", &contracts.ClassedError{Class: contracts.ClassTimeout, Err: errors.New("slow")}), "timeout: slow"},
		{"prefixed message", errors.New("input: width missing"), "input: width missing"},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), "timeout: call: context deadline exceeded"},
		{"canceled", context.Canceled, "cancelled: context canceled"},
		{"panic", errors.New("panic: nil map"), "handler: panic: nil map"},
		{"lease cause", lease.ErrLost, "handler: lease lost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, classify(tc.err))
		})
	}
}

func TestCheckResult(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		res     Result
		err     error
		wantRes Result
		wantErr string
	}{
		{"none", nil, nil, nil, ""},
		{"valid", Result(`{"a":1}`), nil, Result(`{"a":1}`), ""},
		{"valid with error", Result(`[1]`), boom, Result(`[1]`), "boom"},
		{"invalid", Result(`{`), nil, nil, "result is not valid JSON"},
		{"invalid with error keeps the error", Result(`{`), boom, nil, "boom"},
		{"too big", Result(`"` + strings.Repeat("x", 20) + `"`), nil, nil, "result is 22 bytes, at most 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := checkResult(tc.res, tc.err, 16)
			require.Equal(t, tc.wantRes, res)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, tc.wantErr)
			}
		})
	}
}

func TestTruncateError(t *testing.T) {
	t.Parallel()
	require.Equal(t, "handler: x", truncateError("handler: x"))
	long := "handler: " + strings.Repeat("y", 2*maxErrorBytes)
	got := truncateError(long)
	require.True(t, strings.HasPrefix(got, "handler: yyy"))
	require.Less(t, len(got), maxErrorBytes+32)
}

func TestIdleCheckPeriod(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*1e6, float64(idleCheckPeriod(10*1e6)))
	require.Equal(t, 1e9, float64(idleCheckPeriod(1e12)))
	require.Equal(t, 3e8, float64(idleCheckPeriod(3e9)))
}
