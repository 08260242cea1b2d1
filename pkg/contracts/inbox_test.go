package contracts_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestTenantInboxPrefix(t *testing.T) {
	t.Parallel()
	for tenant, want := range map[string]string{
		"acme":        "_INBOX_acme",
		"team.blue-1": "_INBOX_team~blue-1",
		"a_b":         "_INBOX_a_b",
	} {
		require.Equal(t, want, contracts.TenantInboxPrefix(tenant), tenant)
		require.Equal(t, want+".>", contracts.TenantInboxSubjects(tenant), tenant)
	}
}

func TestServiceInboxPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, "_SLUICE_INBOX.gateway.N1", contracts.ServiceInboxPrefix("gateway", "N1"))
	require.Equal(t, "_SLUICE_INBOX.sluice-worker_1___.N1", contracts.ServiceInboxPrefix("sluice-worker.1 *>", "N1"))
	require.Equal(t, "_SLUICE_INBOX._._", contracts.ServiceInboxPrefix("", ""))
	require.Equal(t, "_SLUICE_INBOX.gateway.>", contracts.ServiceInboxSubjects("gateway"))
	require.True(t, contracts.InInbox(contracts.ServiceInboxPrefix("gateway", "N1"), "_SLUICE_INBOX.gateway.N1.r1"))
}

func TestInInbox(t *testing.T) {
	t.Parallel()
	acme := contracts.TenantInboxPrefix("acme")
	tests := []struct {
		prefix, subject string
		want            bool
	}{
		{acme, "_INBOX_acme.r1", true},
		{acme, "_INBOX_acme.r1.r2", true},
		{acme, "_INBOX_acme", false},
		{acme, "_INBOX_acme.", false},
		{acme, "_INBOX_acme..r1", false},
		{acme, "_INBOX_acme.r1.", false},
		{acme, "_INBOX_acmex.r1", false},
		{acme, "_INBOX_acme.*", false},
		{acme, "_INBOX_acme.>", false},
		{acme, "_INBOX_acme.r 1", false},
		{acme, "_INBOX_globex.r1", false},
		{acme, "_INBOX.r1", false},
		{acme, "sluice.jobs.requeue", false},
		{acme, "", false},
		{contracts.DefaultInboxPrefix, "_INBOX.r1", true},
		{contracts.DefaultInboxPrefix, "_INBOX_acme.r1", false},
		{contracts.DefaultInboxPrefix, "_INBOXr1", false},
		{contracts.TenantInboxPrefix("team.blue"), "_INBOX_team~blue.r1", true},
		{contracts.TenantInboxPrefix("team.blue"), "_INBOX_team.blue.r1", false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, contracts.InInbox(tc.prefix, tc.subject), "%q in %q", tc.subject, tc.prefix)
	}
}

func TestInSomeTenantInbox(t *testing.T) {
	t.Parallel()
	for subject, want := range map[string]bool{
		"_INBOX_acme.r1":           true,
		"_INBOX_team~blue.r1.r2":   true,
		"_INBOX_.r1":               false,
		"_INBOX_acme":              false,
		"_INBOX_acme.":             false,
		"_INBOX.r1":                false,
		"_SLUICE_INBOX.gateway.r1": false,
		"sluice.jobs.requeue":      false,
		"$JS.API.STREAM.LIST":      false,
		"_INBOX_*.r1":              false,
		"_INBOX_acme.>":            false,
		"":                         false,
	} {
		require.Equal(t, want, contracts.InSomeTenantInbox(subject), subject)
	}
}

// FuzzInInbox checks that whatever InInbox or InSomeTenantInbox accepts
// is a reply subject under the prefix: no empty token, no wildcard, no
// white space, and never an internal subject.
func FuzzInInbox(f *testing.F) {
	for _, s := range []string{"_INBOX_acme.r1", "_INBOX.r1", "sluice.jobs.requeue", "_INBOX_acme..x", "_INBOX_a.>", "_INBOX_a.\t"} {
		f.Add("acme", s)
	}
	f.Fuzz(func(t *testing.T, tenant, subject string) {
		valid := func() {
			for tok := range strings.SplitSeq(subject, ".") {
				if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\v") {
					t.Fatalf("accepted %q with token %q", subject, tok)
				}
			}
			if strings.HasPrefix(subject, "sluice.") || strings.HasPrefix(subject, "$") || strings.HasPrefix(subject, contracts.ServiceInboxRoot+".") {
				t.Fatalf("accepted internal subject %q", subject)
			}
		}
		prefix := contracts.TenantInboxPrefix(tenant)
		if contracts.InInbox(prefix, subject) {
			if !strings.HasPrefix(subject, prefix+".") {
				t.Fatalf("%q accepted outside %q", subject, prefix)
			}
			if !strings.ContainsAny(tenant, " \t\r\n\f\v*>") {
				valid()
			}
		}
		if contracts.InSomeTenantInbox(subject) {
			if !strings.HasPrefix(subject, "_INBOX_") {
				t.Fatalf("%q accepted outside every tenant inbox", subject)
			}
			valid()
		}
	})
}
