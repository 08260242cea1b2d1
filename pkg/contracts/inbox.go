package contracts

import "strings"

// Reply inboxes. Every NATS connection has an inbox prefix of its own
// (nats.CustomInboxPrefix), so that what answers one connection's requests
// reaches no other: a tenant's is TenantInboxPrefix, a service's starts
// with ServiceInboxRoot, whose first token no tenant inbox can have. A
// prefix here is what nats.CustomInboxPrefix takes (no trailing '.'); the
// connection's reply subjects are the prefix, '.', and a unique part.
const (
	// DefaultInboxPrefix is the inbox prefix of a NATS client that sets
	// none. Nobody in token mode may read it; in open mode the gateway
	// answers there as well as in the named tenant's inbox.
	DefaultInboxPrefix = "_INBOX"
	// ServiceInboxRoot is the first token of every service connection's
	// inbox prefix (ServiceInboxPrefix).
	ServiceInboxRoot = "_SLUICE_INBOX"

	// tenantInboxRoot starts every tenant's inbox prefix; the tenant's
	// subject token follows in the same token.
	tenantInboxRoot = "_INBOX_"
)

// TenantInboxPrefix is the inbox prefix of tenant's connections:
// "_INBOX_<tenant>", with the tenant made one subject token as in its
// event subjects ('.' becomes '~'). The gateway answers a tenant's NATS
// requests only to reply subjects under it.
func TenantInboxPrefix(tenant string) string { return tenantInboxRoot + tenantToken(tenant) }

// TenantInboxSubjects is the filter of every reply subject under tenant's
// inbox prefix: what a tenant's connection may subscribe to for replies.
func TenantInboxSubjects(tenant string) string { return TenantInboxPrefix(tenant) + ".>" }

// ServiceInboxPrefix is the inbox prefix of one service connection:
// ServiceInboxRoot, the connection's NATS user (or its client name when
// it has none) as one subject token, and unique, which tells the
// connections of one user apart. A static NATS configuration lets a
// service user subscribe to ServiceInboxSubjects(user).
func ServiceInboxPrefix(who, unique string) string {
	return ServiceInboxRoot + "." + serviceToken(who) + "." + serviceToken(unique)
}

// ServiceInboxSubjects is the filter of every reply subject of the service
// connections of one NATS user (or client name).
func ServiceInboxSubjects(who string) string {
	return ServiceInboxRoot + "." + serviceToken(who) + ".>"
}

// serviceToken makes a user or client name one subject token: every byte
// but letters, digits, '-' and '_' becomes '_'; an empty name is "_".
func serviceToken(name string) string {
	if name == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}

// InInbox reports whether subject is a reply subject under the inbox
// prefix: the prefix, '.', then one or more non-empty tokens without
// wildcards or white space.
func InInbox(prefix, subject string) bool {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	return ok && validReplyTail(rest)
}

// InSomeTenantInbox reports whether subject is a reply subject under some
// tenant's inbox prefix ("_INBOX_<token>." and more): where the gateway may
// answer a caller it could not identify, with nothing but the refusal.
func InSomeTenantInbox(subject string) bool {
	rest, ok := strings.CutPrefix(subject, tenantInboxRoot)
	if !ok {
		return false
	}
	token, tail, ok := strings.Cut(rest, ".")
	return ok && token != "" && validReplyTail(token) && validReplyTail(tail)
}

// validReplyTail reports whether s is one or more dot-separated non-empty
// tokens holding no wildcard and no white space.
func validReplyTail(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\v") {
			return false
		}
	}
	return true
}
