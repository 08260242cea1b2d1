package auth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec    string
		ok      bool
		tenants []string
	}{
		{"", true, []string{}},
		{"   ", true, []string{}},
		{"acme:t1", true, []string{"acme"}},
		{" acme:t1 , globex:t2 ", true, []string{"acme", "globex"}},
		{"acme:t1,acme:t2", true, []string{"acme"}},
		{"acme:t1,acme:t1", true, []string{"acme"}},
		{"a.b_c-D9:t:with:colons", true, []string{"a.b_c-D9"}},
		{"acme", false, nil},
		{"acme:", false, nil},
		{":tok", false, nil},
		{"acme:t1,", false, nil},
		{",acme:t1", false, nil},
		{"ac me:t1", false, nil},
		{"acme:t 1", false, nil},
		{"acme:t\x001", false, nil},
		{"acme:tök", false, nil},
		{strings.Repeat("a", 65) + ":t", false, nil},
		{"acme:" + strings.Repeat("t", MaxTokenLen+1), false, nil},
		{"acme:same,globex:same", false, nil},
	}
	for _, tc := range cases {
		a, err := Parse(tc.spec)
		if !tc.ok {
			require.Error(t, err, tc.spec)
			continue
		}
		require.NoError(t, err, tc.spec)
		require.Equal(t, len(tc.tenants) == 0, a.Open(), tc.spec)
		require.Equal(t, tc.tenants, a.Tenants(), tc.spec)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	a, err := Parse("acme:alpha-1,acme:alpha-2,globex:gamma")
	require.NoError(t, err)
	for token, want := range map[string]string{"alpha-1": "acme", "alpha-2": "acme", "gamma": "globex"} {
		got, ok := a.Lookup(token)
		require.True(t, ok, token)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "alpha", "alpha-10", "gamma ", "GAMMA", "acme", "alpha-1,gamma"} {
		_, ok := a.Lookup(bad)
		require.False(t, ok, bad)
	}
	var open Authenticator
	_, ok := open.Lookup("anything")
	require.False(t, ok)
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Bearer abc":         "abc",
		"bearer abc":         "abc",
		"BEARER abc":         "abc",
		"Bearer":             "",
		"Bearer ":            "",
		"Bearer  abc":        "",
		"Bearer abc def":     "",
		"Bearer abc\r\nX: y": "",
		"Basic abc":          "",
		"abc":                "",
		"":                   "",
	}
	for header, want := range cases {
		got, ok := BearerToken(header)
		require.Equal(t, want != "", ok, "%q", header)
		require.Equal(t, want, got, "%q", header)
	}
}

func TestTenants(t *testing.T) {
	t.Parallel()
	tok, err := Parse("acme:t1")
	require.NoError(t, err)
	open, err := Parse("")
	require.NoError(t, err)

	got, err := tok.HTTPTenant("Bearer t1")
	require.NoError(t, err)
	require.Equal(t, "acme", got)
	_, err = tok.HTTPTenant("Bearer t2")
	require.ErrorIs(t, err, ErrUnauthorized)
	_, err = tok.HTTPTenant("")
	require.ErrorIs(t, err, ErrUnauthorized)
	got, err = open.HTTPTenant("Bearer whatever")
	require.NoError(t, err)
	require.Equal(t, DefaultTenant, got)

	got, err = tok.NATSTenant("t1", "globex")
	require.NoError(t, err)
	require.Equal(t, "acme", got, "the token decides, not the header")
	_, err = tok.NATSTenant("", "acme")
	require.ErrorIs(t, err, ErrUnauthorized)
	got, err = open.NATSTenant("", "")
	require.NoError(t, err)
	require.Equal(t, DefaultTenant, got)
	got, err = open.NATSTenant("", "team-1")
	require.NoError(t, err)
	require.Equal(t, "team-1", got)
	_, err = open.NATSTenant("", "../x")
	require.ErrorIs(t, err, ErrBadTenant)
}

// TestKey: the key depends on the set of tokens (not their order, not
// the purpose's neighbours) and on the purpose.
func TestKey(t *testing.T) {
	t.Parallel()
	parse := func(spec string) *Authenticator {
		a, err := Parse(spec)
		require.NoError(t, err)
		return a
	}
	ab := parse("a:tok-a-1,b:tok-b-1")
	require.Equal(t, ab.Key("x"), parse(" b:tok-b-1 , a:tok-a-1").Key("x"), "order does not matter")
	require.NotEqual(t, ab.Key("x"), ab.Key("y"), "each purpose its own key")
	require.NotEqual(t, ab.Key("x"), parse("a:tok-a-1,b:tok-b-2").Key("x"), "another token, another key")
	require.NotEqual(t, ab.Key("x"), parse("a:tok-a-1").Key("x"))
	require.Equal(t, parse("").Key("x"), (*Authenticator)(nil).Key("x"), "open mode: one fixed key")
}
