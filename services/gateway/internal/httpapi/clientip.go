package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies are the peers trusted to say who their client is in
// X-Forwarded-For (SLUICE_GATEWAY_TRUSTED_PROXIES): a load balancer in front of
// the gateways. Every other peer is the client itself, whatever it sends.
type Proxies []netip.Prefix

// ParseProxies reads a list of CIDRs (or single addresses) of trusted
// proxies.
func ParseProxies(list []string) (Proxies, error) {
	var out Proxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// trusted reports whether a is one of the proxies.
func (p Proxies) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, pre := range p {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP is the address of the client that sent r: the connection's
// peer, or when the peer is a trusted proxy, the nearest address in
// X-Forwarded-For (read from the right, the hops the proxies appended)
// that is not a trusted proxy itself. A hop that is not an address stops
// the walk at the last trusted one: what lies left of it was written by
// the client and proves nothing. The zero Addr means the peer address is
// unreadable (r.RemoteAddr is then used as it is).
func (p Proxies) ClientIP(r *http.Request) netip.Addr {
	peer := peerAddr(r.RemoteAddr)
	if !peer.IsValid() || len(p) == 0 || !p.trusted(peer) {
		return peer
	}
	client := peer
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a := peerAddr(strings.TrimSpace(parts[j]))
			if !a.IsValid() {
				return client
			}
			client = a.Unmap()
			if !p.trusted(client) {
				return client
			}
		}
	}
	return client
}

// peerAddr parses "ip", "ip:port" or "[ipv6]:port", or returns the zero Addr.
func peerAddr(s string) netip.Addr {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}
