package store

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Page sizes of List, for every driver.
const (
	// DefaultListLimit is the page size of a Query without a Limit.
	DefaultListLimit = 50
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// ListLimit is the page size a driver uses for a Query's Limit: 0 (or
// less) is DefaultListLimit, more than MaxListLimit is cut to it.
func ListLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultListLimit
	case limit > MaxListLimit:
		return MaxListLimit
	}
	return limit
}

// EncodeCursor makes the opaque List cursor that points after the job
// created at created with id: base64 of "<unix nanoseconds>:<id>". Every
// driver pages with it, newest first by (created_at, id).
func EncodeCursor(created time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created.UnixNano(), 10) + ":" + id))
}

// DecodeCursor reads a cursor EncodeCursor made; anything else is
// ErrBadCursor.
func DecodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	nanos, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return time.Time{}, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	n, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	return time.Unix(0, n).UTC(), id, nil
}

// GlobalScope is the admission counter of the whole store.
const GlobalScope = "global"

// TenantScope is the admission counter of one tenant.
func TenantScope(tenant string) string { return "tenant:" + tenant }

// ItemsScope is the counter of one tenant's items in flight: the sum of
// its active jobs' contracts.Job.HeldItems, what Caps.TenantItems bounds.
func ItemsScope(tenant string) string { return "items:" + tenant }
