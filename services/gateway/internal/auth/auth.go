// Package auth turns API credentials into tenants.
//
// SLUICE_API_TOKENS lists "tenant:token" pairs. With at least one pair the
// gateway runs in token mode: every API request must carry a known token
// and acts as that token's tenant. With none it runs in open mode: every
// HTTP request is the default tenant and a NATS request may name its tenant
// in a header.
//
// Tokens are kept only as SHA-256 digests and compared in constant time
// against every configured token, so neither the comparison's timing nor a
// memory dump reveals them. No error of this package contains a token.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultTenant is the tenant of every request in open mode that names none.
const DefaultTenant = "default"

// MaxTokenLen bounds a configured or presented token.
const MaxTokenLen = 4096

// Errors of tenant resolution.
var (
	// ErrUnauthorized means the request carries no token or an unknown one.
	ErrUnauthorized = errors.New("auth: missing or invalid token")
	// ErrBadTenant means an open-mode request named a malformed tenant.
	ErrBadTenant = errors.New("auth: malformed tenant name")
)

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidTenant reports whether name can be a tenant: 1–64 letters, digits,
// '_', '.' or '-'.
func ValidTenant(name string) bool { return tenantRE.MatchString(name) }

// entry is one configured token.
type entry struct {
	tenant string
	digest [sha256.Size]byte
}

// Authenticator resolves credentials to tenants. It is immutable and safe
// for concurrent use. The zero value is open mode.
type Authenticator struct {
	entries []entry
}

// Parse reads a SLUICE_API_TOKENS value: comma-separated "tenant:token"
// pairs, spaces around entries ignored. An empty (or all-space) value is
// open mode. A tenant may have several tokens (rotation); one token may not
// belong to two tenants. Errors say which entry is wrong, never its token.
func Parse(spec string) (*Authenticator, error) {
	a := &Authenticator{}
	if strings.TrimSpace(spec) == "" {
		return a, nil
	}
	owner := map[[sha256.Size]byte]string{}
	for i, raw := range strings.Split(spec, ",") {
		n := i + 1
		item := strings.TrimSpace(raw)
		if item == "" {
			return nil, fmt.Errorf("entry %d is empty, want tenant:token", n)
		}
		tenant, token, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("entry %d has no ':', want tenant:token", n)
		}
		if !ValidTenant(tenant) {
			return nil, fmt.Errorf("entry %d: tenant %q must be 1-64 letters, digits, '_', '.' or '-'", n, tenant)
		}
		if !validToken(token) {
			return nil, fmt.Errorf("entry %d (tenant %s): token must be 1-%d visible ASCII characters without spaces or commas", n, tenant, MaxTokenLen)
		}
		d := sha256.Sum256([]byte(token))
		if prev, dup := owner[d]; dup {
			if prev != tenant {
				return nil, fmt.Errorf("entry %d (tenant %s): the same token is also given to tenant %s", n, tenant, prev)
			}
			continue
		}
		owner[d] = tenant
		a.entries = append(a.entries, entry{tenant: tenant, digest: d})
	}
	return a, nil
}

// validToken reports whether a token is 1–MaxTokenLen visible ASCII
// characters (no space, no control character, no comma).
func validToken(t string) bool {
	if t == "" || len(t) > MaxTokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c > '~' || c == ',' {
			return false
		}
	}
	return true
}

// Open reports whether no tokens are configured.
func (a *Authenticator) Open() bool { return a == nil || len(a.entries) == 0 }

// Tenants lists the configured tenants, sorted, without duplicates.
func (a *Authenticator) Tenants() []string {
	if a == nil {
		return nil
	}
	out := make([]string, 0, len(a.entries))
	for _, e := range a.entries {
		out = append(out, e.tenant)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Lookup returns the tenant a token belongs to. It compares the token's
// digest with every configured digest, without stopping at a match, so the
// time taken does not depend on which token matched or how much of it did.
func (a *Authenticator) Lookup(token string) (string, bool) {
	if a.Open() || !validToken(token) {
		return "", false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.entries {
		if subtle.ConstantTimeCompare(d[:], a.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return a.entries[found].tenant, true
}

// Key derives a secret key for purpose from the configured tokens (HMAC-
// SHA-256 keyed by their digests in sorted order): every gateway with the
// same SLUICE_API_TOKENS, in any order, derives the same key, and nobody
// who lacks one of the tokens can. In open mode it is a fixed key, as
// open mode keeps nothing from anyone.
func (a *Authenticator) Key(purpose string) [sha256.Size]byte {
	var digests [][]byte
	if a != nil {
		for _, e := range a.entries {
			digests = append(digests, e.digest[:])
		}
	}
	slices.SortFunc(digests, bytes.Compare)
	mac := hmac.New(sha256.New, bytes.Join(digests, nil))
	mac.Write([]byte("sluice\x00" + purpose))
	return [sha256.Size]byte(mac.Sum(nil))
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// header value. The scheme is case-insensitive; exactly one space separates
// it from the token, which may hold no whitespace or control characters.
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !validToken(token) {
		return "", false
	}
	return token, true
}

// HTTPTenant resolves the tenant of an HTTP request from its Authorization
// header value: the default tenant in open mode, the bearer token's tenant
// in token mode, or ErrUnauthorized.
func (a *Authenticator) HTTPTenant(authorization string) (string, error) {
	if a.Open() {
		return DefaultTenant, nil
	}
	token, ok := BearerToken(authorization)
	if !ok {
		return "", ErrUnauthorized
	}
	tenant, ok := a.Lookup(token)
	if !ok {
		return "", ErrUnauthorized
	}
	return tenant, nil
}

// NATSTenant resolves the tenant of a NATS request from its token and
// tenant headers. Token mode needs a known token (ErrUnauthorized) and
// ignores the tenant header; open mode takes the tenant header, or the
// default tenant when it is empty, and refuses a malformed name
// (ErrBadTenant).
func (a *Authenticator) NATSTenant(token, tenant string) (string, error) {
	if !a.Open() {
		t, ok := a.Lookup(token)
		if !ok {
			return "", ErrUnauthorized
		}
		return t, nil
	}
	if tenant == "" {
		return DefaultTenant, nil
	}
	if !ValidTenant(tenant) {
		return "", ErrBadTenant
	}
	return tenant, nil
}
