package contracts

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// JSON decode errors in API terms. encoding/json names Go types ("cannot
// unmarshal string into Go struct field SubmitRequest.priority of type
// int"), which mean nothing to a caller of the API. Every decode of
// outside input goes through decodeStrict, whose errors name the JSON
// field path and the expected JSON type instead:
//
//	priority: expected an integer, got a string
//	inputs[1].name: expected a string, got a number
//	inputs[0].digest: unknown field
//	not valid JSON: invalid character '}' looking for beginning of value (at byte 12)
//
// A path is written as the caller wrote the document: object keys joined
// by '.', array elements by index ("items[3]"); the root has no path.

// DecodeError is a JSON document that could not be decoded (HTTP 400): at
// Path (empty for the document itself, or when the JSON text is broken),
// Reason in API terms.
type DecodeError struct {
	Path   string
	Reason string
	// dup: the error is a duplicate key (errors.Is ErrDuplicateKey).
	dup bool
}

// Is reports whether target is ErrDuplicateKey and e is a duplicate key.
func (e *DecodeError) Is(target error) bool { return e.dup && target == ErrDuplicateKey }

// under is e at path inside another document: its path starts there.
func (e *DecodeError) under(path string) *DecodeError {
	return &DecodeError{Path: joinPath(path, e.Path), Reason: e.Reason, dup: e.dup}
}

// Error implements error as "path: reason" (just the reason at the root).
func (e *DecodeError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields, trailing data and duplicate keys (dupkeys.go). Its errors are
// *DecodeError.
func decodeStrict(data []byte, v any) error {
	return decodeStrictSkip(data, v, false)
}

// decodeStrictSkip is decodeStrict; with skipRaw, the values it keeps as
// json.RawMessage are not looked into for duplicate keys: the caller
// decodes each of them with decodeStrict.
func decodeStrictSkip(data []byte, v any, skipRaw bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return explainDecode(data, reflect.TypeOf(v), err)
	}
	// Anything but JSON whitespace after the value is trailing data. (A
	// second Decode would miss a stray ']' or '}': it fails on them as a
	// syntax error, which used to read as "nothing follows".)
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return &DecodeError{Reason: "trailing data after the JSON value"}
	}
	if de := checkDuplicateKeys(data, reflect.TypeOf(v), skipRaw); de != nil {
		return de
	}
	return nil
}

// DecodeWithin is decodeStrict for a document that sits at path inside
// another one (a job's payload: "payload"): its errors' paths start there.
func DecodeWithin(path string, data []byte, v any) error {
	err := decodeStrict(data, v)
	var de *DecodeError
	if path == "" || !errors.As(err, &de) {
		return err
	}
	return de.under(path)
}

// innerDecodeError is a decode error inside a value that decodes itself
// (an UnmarshalJSON of ours): encoding/json passes it on with no place, so
// it carries the value's text, by which the outer decode finds the path
// of the value and puts it in front of the error's own.
type innerDecodeError struct {
	raw []byte
	err *DecodeError
}

// newInnerDecodeError wraps err, an error of explainDecode for the value
// raw.
func newInnerDecodeError(raw []byte, err error) error {
	var de *DecodeError
	if !errors.As(err, &de) {
		return err
	}
	return &innerDecodeError{raw: bytes.Clone(raw), err: de}
}

// Error implements error with the error inside the value.
func (e *innerDecodeError) Error() string { return e.err.Error() }

// explainDecode turns an error of decoding data into a value of type t
// (a pointer) into a *DecodeError.
func explainDecode(data []byte, t reflect.Type, err error) error {
	var (
		te    *json.UnmarshalTypeError
		se    *json.SyntaxError
		inner *innerDecodeError
	)
	switch {
	case errors.As(err, &inner):
		// The value is text of data: its path is the one whose '{' or
		// first token ends one byte into it (the first such text, which
		// gives this same error).
		at := ""
		if i := bytes.Index(data, inner.raw); i > 0 {
			at, _ = pathAtOffset(data, int64(i)+1)
		}
		return inner.err.under(at)
	case errors.As(err, &te):
		path, ok := pathAtOffset(data, te.Offset)
		if !ok {
			path = te.Field // without array indices, but a path
		}
		return &DecodeError{Path: path, Reason: "expected " + jsonTypeOf(te.Type) + ", got " + describeValue(te.Value)}
	case errors.As(err, &se):
		return &DecodeError{Reason: fmt.Sprintf("not valid JSON: %s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)}
	case errors.Is(err, io.EOF):
		return &DecodeError{Reason: "not valid JSON: empty"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &DecodeError{Reason: "not valid JSON: it ends early"}
	}
	if name, ok := unknownFieldName(err); ok {
		path, found := unknownFieldPath(data, t)
		if !found {
			path = name
		}
		return &DecodeError{Path: path, Reason: "unknown field"}
	}
	// An UnmarshalJSON of ours refused its value; its message is ours.
	return &DecodeError{Reason: strings.TrimPrefix(err.Error(), "json: ")}
}

// unknownFieldName reads the field name out of encoding/json's error for
// an unknown field (it has no type of its own).
func unknownFieldName(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	name, uerr := strconv.Unquote(strings.TrimPrefix(msg, prefix))
	if uerr != nil {
		return "", false
	}
	return name, true
}

// jsonTypeOf names what JSON value decodes into a Go type.
func jsonTypeOf(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) && t.Kind() != reflect.Slice && t.Kind() != reflect.Map && t.Kind() != reflect.Struct {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// describeValue names the JSON value encoding/json found ("string",
// "number", "number 1.5", "bool", "array", "object").
func describeValue(v string) string {
	switch {
	case v == "string":
		return "a string"
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		n := strings.TrimPrefix(v, "number ")
		if len(n) > 32 {
			n = n[:32] + "…"
		}
		return n
	case v == "bool":
		return "true or false"
	case v == "array":
		return "an array"
	case v == "object":
		return "an object"
	case v == "null":
		return "null"
	}
	return "a " + v
}

// joinPath appends a key or an "[i]" to a path.
func joinPath(path, next string) string {
	switch {
	case path == "":
		return next
	case next == "":
		return path
	case strings.HasPrefix(next, "["):
		return path + next
	}
	return path + "." + next
}

// keyPath is the path of key inside path. A key that does not read as a
// plain name is quoted.
func keyPath(path, key string) string {
	if key == "" || strings.ContainsAny(key, ".[]\" \t\r\n") || !printable(key) {
		key = strconv.Quote(key)
	}
	if len(key) > 64 {
		key = key[:64] + "…"
	}
	return joinPath(path, key)
}

// maxWalkDepth bounds the nesting a path walk follows (encoding/json
// refuses documents nested deeper than 10,000 anyway).
const maxWalkDepth = 512

// pathAtOffset finds the path of the value encoding/json reported a type
// error at: the one whose first token ends at offset (a scalar, or the
// '{' or '[' opening a composite).
func pathAtOffset(data []byte, offset int64) (string, bool) {
	w := walker{dec: json.NewDecoder(bytes.NewReader(data)), offset: offset}
	w.dec.UseNumber()
	w.value("", nil, 0)
	return w.found, w.ok
}

// unknownFieldPath finds the path of the first object key, in document
// order, that names no field of the struct type the object decodes into
// (t: the pointer given to Decode): the unknown field encoding/json
// refused first.
func unknownFieldPath(data []byte, t reflect.Type) (string, bool) {
	w := walker{dec: json.NewDecoder(bytes.NewReader(data)), offset: -1}
	w.dec.UseNumber()
	w.value("", t, 0)
	return w.found, w.ok
}

// walker reads a JSON document token by token, keeping the path of the
// value it is in, until it finds what it looks for: the value whose first
// token ends at offset (offset ≥ 0), or else an object key its Go type
// has no field for.
type walker struct {
	dec    *json.Decoder
	offset int64
	found  string
	ok     bool
}

// value reads one value at path, which decodes into t (nil: not known,
// or nothing that has fields); it reports false when the walk is over
// (found, or the document ends or breaks).
func (w *walker) value(path string, t reflect.Type, depth int) bool {
	tok, err := w.dec.Token()
	if err != nil || depth > maxWalkDepth {
		return false
	}
	if w.offset >= 0 && w.dec.InputOffset() == w.offset {
		w.found, w.ok = path, true
		return false
	}
	d, isDelim := tok.(json.Delim)
	if !isDelim {
		return true
	}
	t = fieldsOf(t)
	switch d {
	case '{':
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return false
			}
			key, _ := kt.(string)
			var next reflect.Type
			if t != nil {
				switch t.Kind() {
				case reflect.Struct:
					f, known := structField(t, key)
					if !known && w.offset < 0 {
						w.found, w.ok = keyPath(path, key), true
						return false
					}
					next = f
				case reflect.Map:
					next = t.Elem()
				}
			}
			if !w.value(keyPath(path, key), next, depth+1) {
				return false
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if !w.value(joinPath(path, "["+strconv.Itoa(i)+"]"), elem, depth+1) {
				return false
			}
		}
	}
	_, err = w.dec.Token() // the closing delimiter
	return err == nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// fieldsOf is t without its pointers, or nil when its value's inside is
// not decoded field by field (it decodes itself, or takes anything).
func fieldsOf(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Implements(jsonUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return t
	}
	return nil
}

// structField finds the field key names in struct t as encoding/json does
// (its JSON name, exactly or else ignoring case, through embedded structs)
// and returns its type.
func structField(t reflect.Type, key string) (reflect.Type, bool) {
	var fold reflect.Type
	folded := false
	var scan func(t reflect.Type, depth int) (reflect.Type, bool)
	scan = func(t reflect.Type, depth int) (reflect.Type, bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct && depth < 8 {
					if got, ok := scan(et, depth+1); ok {
						return got, true
					}
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if name == key {
				return ft, true
			}
			if !folded && strings.EqualFold(name, key) {
				fold, folded = ft, true
			}
		}
		return nil, false
	}
	if got, ok := scan(t, 0); ok {
		return got, true
	}
	return fold, folded
}
