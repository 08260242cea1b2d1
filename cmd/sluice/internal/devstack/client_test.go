package devstack

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestGoClientAgainstTheStack drives the public Go client against the whole
// stack: submit and wait with progress, a job already final, typed errors
// (404, 409, 422, 429 with its limit and Retry-After).
func TestGoClientAgainstTheStack(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_MAX_ACTIVE": "1"})
	c, err := client.New(b.base)
	require.NoError(t, err)
	ctx := t.Context()

	j, created, err := c.Submit(ctx, contracts.SubmitRequest{Kind: "sleep", Payload: json.RawMessage(`{"ms":600}`)})
	require.NoError(t, err)
	require.True(t, created)
	_, _, err = c.Submit(ctx, contracts.SubmitRequest{Kind: "sleep"})
	var ce *client.Error
	require.ErrorIs(t, err, client.ErrRejected)
	require.True(t, errors.As(err, &ce))
	require.Equal(t, contracts.LimitGlobal, ce.Limit)
	require.Positive(t, ce.RetryAfter)

	var progress int
	final, err := c.Wait(ctx, j.ID, func(ev contracts.Event) {
		if ev.Type == contracts.EventProgress {
			progress++
		}
	})
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, final.State)
	require.NotEmpty(t, final.Result)
	require.Positive(t, progress, "the sleep kind reports progress")

	again, err := c.Wait(ctx, j.ID, nil) // already final: the stream answers 204
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, again.State)

	_, err = c.Get(ctx, "no-such-job")
	require.ErrorIs(t, err, client.ErrNotFound)
	_, err = c.Cancel(ctx, j.ID)
	require.ErrorIs(t, err, client.ErrConflict)
	_, _, err = c.Submit(ctx, contracts.SubmitRequest{Kind: "sleep", Priority: 99})
	require.ErrorIs(t, err, client.ErrInvalid)

	page, err := c.List(ctx, client.Query{State: contracts.StateSucceeded})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	st, err := c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.MaxActive)
}
