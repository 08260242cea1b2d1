package contracts_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestEventSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tenant, job, prefix string
	}{
		{"acme", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "sluice.events.acme."},
		{"acme.eu", "j1", "sluice.events.acme~eu."},
		{"acme", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b-000042", "sluice.events.acme."},
	} {
		subject := contracts.EventSubject(tc.tenant, tc.job)
		require.True(t, strings.HasPrefix(subject, tc.prefix), subject)
		bucket := strings.TrimPrefix(subject, tc.prefix)
		require.Len(t, bucket, 2, "one token of two hex digits: %s", subject)
		require.Equal(t, subject, contracts.EventSubject(tc.tenant, tc.job), "the same job, the same subject")
		require.Equal(t, contracts.Event{Tenant: tc.tenant, JobID: tc.job}.Subject(), subject)
	}

	// Jobs spread over the buckets, and every subject is matched by the
	// tenant's filter (one token after the tenant's).
	seen := map[string]bool{}
	for i := range 20_000 {
		s := contracts.EventSubject("acme", fmt.Sprintf("job-%d", i))
		require.Equal(t, 3, strings.Count(s, "."), s)
		seen[s] = true
	}
	require.Len(t, seen, 256)
	require.Equal(t, "sluice.events.acme.*", contracts.TenantEventSubjects("acme"))
}
