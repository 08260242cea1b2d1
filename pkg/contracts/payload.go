package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// A job's payload, and each fan-out item (its child's payload), is kept
// as the JSON text the tenant submitted, compacted: the whitespace between
// tokens is dropped, and nothing else changes. Every number keeps its
// digits, sign and exponent (12345678901234567890, -0, 1e400 and a
// 39-digit integer stay as they are, whatever a float64 would make of
// them) and every string keeps its escapes. The store, the API and the
// worker hand the same text on; what a number means is the handler's
// business.
//
// Text that is not UTF-8 is refused: JSON text must be UTF-8 (RFC 8259),
// and a store or a decoder on the way would replace or refuse it.

// ErrNotUTF8 is the error of a payload or item that is not UTF-8 text.
var ErrNotUTF8 = errors.New("is not valid UTF-8 text")

// ErrNotJSON is the error of a payload or item that is not one JSON value.
var ErrNotJSON = errors.New("is not valid JSON")

// CompactPayload is raw as it is kept (see above): a new compact copy of
// one JSON value, or ErrNotJSON or ErrNotUTF8.
func CompactPayload(raw []byte) (json.RawMessage, error) {
	var b bytes.Buffer
	b.Grow(len(raw))
	if err := json.Compact(&b, raw); err != nil {
		return nil, ErrNotJSON
	}
	if !utf8.Valid(b.Bytes()) {
		return nil, ErrNotUTF8
	}
	return json.RawMessage(b.Bytes()), nil
}

// EncodeJSON is json.Marshal without its HTML escaping: the payloads and
// results inside v go out as they came in (json.Marshal would write <, >,
// &, U+2028 and U+2029 inside their strings as \u escapes).
func EncodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
