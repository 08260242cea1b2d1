package inputs

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/pkg/confine"
)

// AllowVariable is the variable that widens what inputs may be fetched
// from.
const AllowVariable = "SLUICE_WORKER_FETCH_ALLOW"

// Allow is what a worker may fetch inputs from. Public http(s) addresses
// are always allowed (inputs live on public object stores and web
// servers, and the pinned digest vouches for what comes back); the
// worker's own network (loopback, link-local with the cloud metadata
// address, private, shared, unspecified, multicast and reserved ranges)
// only as far as SLUICE_WORKER_FETCH_ALLOW names it, and local files only
// under the file roots it names. The zero value allows public http(s)
// only.
type Allow struct {
	hosts map[string]bool
	nets  []netip.Prefix
	files confine.Roots
}

// ParseAllow reads the entries of SLUICE_WORKER_FETCH_ALLOW: an absolute
// directory (or file:// URI of one) is a file root, an address or CIDR
// opens that range, anything else is a host name whose addresses are all
// allowed. Its errors name the entry at fault.
func ParseAllow(entries []string) (Allow, error) {
	a := Allow{hosts: map[string]bool{}}
	var dirs []string
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.HasPrefix(e, "/"):
			dirs = append(dirs, e)
		case strings.HasPrefix(e, "file://"):
			dir := strings.TrimPrefix(e, "file://")
			if !strings.HasPrefix(dir, "/") {
				return Allow{}, fmt.Errorf("%q: a file root is an absolute directory (file:///dir)", e)
			}
			dirs = append(dirs, dir)
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return Allow{}, fmt.Errorf("%q is neither a CIDR nor an absolute directory", e)
			}
			a.nets = append(a.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(e); err == nil {
				ip = ip.Unmap().WithZone("")
				a.nets = append(a.nets, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			name := normalHost(e)
			if !validHost(name) {
				return Allow{}, fmt.Errorf("%q is not a host name, address, CIDR or absolute directory", e)
			}
			a.hosts[name] = true
		}
	}
	roots, err := confine.New(dirs)
	if err != nil {
		return Allow{}, fmt.Errorf("file root %w", err)
	}
	a.files = roots
	return a, nil
}

// normalHost is a host name as compared: lower case, no trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// validHost reports whether h is a DNS name: labels of letters, digits,
// '-' and '_'.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether the host name h is named by the allow list
// (then every address it resolves to is allowed).
func (a Allow) hostAllowed(h string) bool { return a.hosts[normalHost(h)] }

// inner are the ranges of the worker's own network, refused unless
// allowed; the first that holds an address names it.
var inner = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// nat64 is the well-known NAT64 prefix: its addresses carry an IPv4
// address, checked as such.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// refusal is a fetch refused by a rule; its text says which. One the
// allow list can lift says so.
type refusal struct {
	reason string
	fixed  bool // no entry of the allow list lifts it
}

func (r *refusal) Error() string {
	if r.fixed {
		return r.reason
	}
	return r.reason + " (allow it with " + AllowVariable + ")"
}

// checkAddr refuses ip, reached through the host name (the address itself
// when it was given as one), when it lies in the worker's own network and
// the allow list does not name it.
func (a Allow) checkAddr(ip netip.Addr, name string) error {
	ip = ip.Unmap().WithZone("")
	v := ip
	if nat64.Contains(ip) {
		b := ip.As16()
		v = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, p := range a.nets {
		if p.Contains(ip) || p.Contains(v) {
			return nil
		}
	}
	for _, r := range inner {
		if r.prefix.Contains(v) {
			if name == "" || normalHost(name) == ip.String() {
				return &refusal{reason: fmt.Sprintf("address %s is %s", ip, r.what)}
			}
			return &refusal{reason: fmt.Sprintf("host %s resolves to %s, which is %s", name, ip, r.what)}
		}
	}
	return nil
}

// checkHost refuses a URL host given as an address in the worker's own
// network before any connection; names are checked at connect time, on
// the addresses they resolve to.
func (a Allow) checkHost(host string) error {
	if a.hostAllowed(host) {
		return nil
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return nil
	}
	return a.checkAddr(ip, "")
}
