package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClientIP(t *testing.T) {
	t.Parallel()
	proxies, err := ParseProxies([]string{"10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32", ""})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, header ignored", "198.51.100.5:1234", []string{"203.0.113.9"}, "198.51.100.5"},
		{"trusted peer, no header", "10.1.2.3:80", nil, "10.1.2.3"},
		{"trusted peer names the client", "10.1.2.3:80", []string{"203.0.113.9"}, "203.0.113.9"},
		{"client-written hops left of the real one are ignored", "10.1.2.3:80", []string{"1.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"a chain of trusted proxies is walked", "10.1.2.3:80", []string{"203.0.113.9, 10.9.9.9", "192.0.2.1"}, "203.0.113.9"},
		{"single trusted address", "192.0.2.1:80", []string{"203.0.113.10"}, "203.0.113.10"},
		{"IPv6 proxy and client", "[2001:db8::1]:443", []string{"2001:db9::7"}, "2001:db9::7"},
		{"IPv4-mapped peer", "[::ffff:10.0.0.1]:80", []string{"203.0.113.11"}, "203.0.113.11"},
		{"garbage stops at the last trusted hop", "10.1.2.3:80", []string{"203.0.113.9, not-an-ip, 10.2.2.2"}, "10.2.2.2"},
		{"all hops trusted", "10.1.2.3:80", []string{"10.4.4.4"}, "10.4.4.4"},
		{"hop with a port", "10.1.2.3:80", []string{"203.0.113.12:5555"}, "203.0.113.12"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		for _, h := range tc.xff {
			r.Header.Add("X-Forwarded-For", h)
		}
		require.Equal(t, tc.want, proxies.ClientIP(r).String(), tc.name)
	}
	// No proxies: the peer, always.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.2.3:80"
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	require.Equal(t, "10.1.2.3", Proxies(nil).ClientIP(r).String())

	for _, bad := range []string{"10.0.0.0/33", "host.example", "10.0.0.0/8/1"} {
		_, err := ParseProxies([]string{bad})
		require.Error(t, err, bad)
	}
}
