package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Duplicate keys. encoding/json takes the last of two equal keys in an
// object and says nothing, and a json.RawMessage (a job's payload, its
// fan-out items) keeps both: the gateway would echo both while the store,
// a worker and every later reader took one of them, not always the same.
// So decodeStrict refuses a document in which any object, at any depth,
// names a key twice (HTTP 400, "payload.argv: duplicate key"):
//
//   - two keys are equal when their text is, escapes resolved ("a" and
//     "\u0061" are one key), as JSON (RFC 8259, I-JSON) means it;
//   - in an object decoded into a struct, two keys are also equal when
//     they name the same field: encoding/json matches field names
//     ignoring case, so "argv" and "ARGV" both set Argv ("payload.ARGV:
//     duplicate key (the same field as argv)").
//
// The check is a second pass over the text, after encoding/json accepted
// it (so the text is one valid JSON value): a byte scanner that keeps,
// for each open object, the keys seen so far (compared in place, a map
// only for objects of more than dupLinearKeys keys) and the Go type its
// values go to, to know which objects are structs. It allocates nothing
// for a document without escaped keys and without large objects.

// ErrDuplicateKey is matched (errors.Is) by the *DecodeError of a
// document that names a key twice in one object.
var ErrDuplicateKey = errors.New("duplicate key")

// reasonDuplicate is the Reason of a duplicate key's DecodeError.
const reasonDuplicate = "duplicate key"

// dupLinearKeys is the number of keys of one object compared one by one;
// a larger object puts its keys in a map, so a document of many keys
// costs linear time.
const dupLinearKeys = 16

// duplicateError is the *DecodeError of a duplicate key at path; same,
// when not empty, is the field the key names too (a case variant).
func duplicateError(path, same string) *DecodeError {
	reason := reasonDuplicate
	if same != "" {
		reason += " (the same field as " + same + ")"
	}
	return &DecodeError{Path: path, Reason: reason, dup: true}
}

// checkDuplicateKeys returns the *DecodeError of the first key, in
// document order, that repeats one of its object (nil when none). data
// must be one valid JSON value (encoding/json accepted it), decoded into
// t (nil: no Go type known). With skipRaw, values decoded into a
// json.RawMessage are not looked into: the caller decodes each of them
// strictly on its own (a batch's jobs).
func checkDuplicateKeys(data []byte, t reflect.Type, skipRaw bool) *DecodeError {
	s := scanners.Get().(*dupScanner)
	s.data, s.skipRaw = data, skipRaw
	s.pos = s.space(0)
	de := s.value(shapeOf(t), 0)
	path := s.path
	// Kept for the next document, holding nothing of this one.
	clear(s.keys[:cap(s.keys)])
	clear(s.fields[:cap(s.fields)])
	s.data, s.keys, s.fields, s.path = nil, s.keys[:0], s.fields[:0], nil
	scanners.Put(s)
	if de == nil {
		return nil
	}
	// The path was built innermost first.
	for i := len(path) - 1; i >= 0; i-- {
		if seg := path[i]; seg.key {
			de.Path = keyPath(de.Path, seg.text)
		} else {
			de.Path = joinPath(de.Path, "["+strconv.Itoa(seg.index)+"]")
		}
	}
	return de
}

// pathSeg is one step of the path to a duplicate key: an object key or
// an array index.
type pathSeg struct {
	key   bool
	text  string
	index int
}

// dupScanner walks one valid JSON document.
type dupScanner struct {
	data    []byte
	pos     int
	skipRaw bool
	path    []pathSeg  // filled, innermost first, once a duplicate is found
	keys    [][]byte   // the keys of the open objects, one stack for all
	fields  []fieldKey // the fields named in the open structs, likewise
}

// scanners keeps dupScanners, with their stacks, between documents.
var scanners = sync.Pool{New: func() any { return &dupScanner{} }}

// maxDupDepth bounds the nesting the scanner follows; encoding/json
// refuses documents nested deeper than 10,000 before the scanner runs.
const maxDupDepth = 10_001

// space skips JSON whitespace from i.
func (s *dupScanner) space(i int) int {
	for i < len(s.data) {
		switch s.data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// value reads the value at s.pos, which decodes into sh.
func (s *dupScanner) value(sh *shape, depth int) *DecodeError {
	if s.pos >= len(s.data) || depth > maxDupDepth {
		return nil
	}
	if sh.kind == shapeRaw && s.skipRaw {
		s.pos = s.skip(s.pos)
		return nil
	}
	switch s.data[s.pos] {
	case '{':
		return s.object(sh, depth)
	case '[':
		return s.array(sh, depth)
	case '"':
		s.pos, _ = s.str(s.pos)
		if s.pos < 0 {
			s.pos = len(s.data)
		}
	default:
		s.pos = s.scalar(s.pos)
	}
	return nil
}

// object reads an object at s.pos.
func (s *dupScanner) object(sh *shape, depth int) *DecodeError {
	s.pos = s.space(s.pos + 1)
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return nil
	}
	// This object's keys are s.keys[base:], its fields s.fields[fbase:].
	base, fbase := len(s.keys), len(s.fields)
	var big map[string]struct{} // past dupLinearKeys keys
	for s.pos < len(s.data) {
		start := s.pos
		if s.data[start] != '"' {
			break // not JSON: encoding/json refuses it anyway
		}
		end, escaped := s.str(start)
		if end < 0 {
			break
		}
		raw := s.data[start+1 : end-1]
		key := raw
		if escaped || !isASCII(raw) {
			key = canonicalKey(s.data[start:end])
		}
		s.pos = s.space(end)
		if s.pos < len(s.data) && s.data[s.pos] == ':' {
			s.pos = s.space(s.pos + 1)
		}
		next := anyShape
		switch sh.kind {
		case shapeStruct:
			f, ok := sh.info.lookup(key)
			if ok {
				for _, seen := range s.fields[fbase:] {
					if seen.field == f {
						same := ""
						if !bytes.Equal(seen.key, key) {
							same = string(seen.key)
						}
						return s.found(key, same)
					}
				}
				s.fields = append(s.fields, fieldKey{f, key})
				next = sh.info.shape(f)
				break
			}
			// encoding/json refused unknown fields before this pass;
			// an unknown key can only be of a lenient decode: compared
			// as text below.
			fallthrough
		default:
			if sh.kind == shapeMap || sh.kind == shapeList {
				next = sh.elemShape()
			}
			switch {
			case big != nil:
				if _, dup := big[string(key)]; dup {
					return s.found(key, "")
				}
				big[string(key)] = struct{}{}
			default:
				for _, k := range s.keys[base:] {
					if bytes.Equal(k, key) {
						return s.found(key, "")
					}
				}
				s.keys = append(s.keys, key)
				if len(s.keys)-base > dupLinearKeys {
					big = make(map[string]struct{}, 2*dupLinearKeys)
					for _, k := range s.keys[base:] {
						big[string(k)] = struct{}{}
					}
				}
			}
		}
		if de := s.value(next, depth+1); de != nil {
			s.path = append(s.path, pathSeg{key: true, text: string(key)})
			return de
		}
		s.pos = s.space(s.pos)
		if s.pos >= len(s.data) || s.data[s.pos] != ',' {
			break
		}
		s.pos = s.space(s.pos + 1)
	}
	s.pos++ // '}'
	s.keys, s.fields = s.keys[:base], s.fields[:fbase]
	return nil
}

// fieldKey is a struct field an object named, and the key it used.
type fieldKey struct {
	field int
	key   []byte
}

// found is the error of key, found twice; the path is filled on the way
// out.
func (s *dupScanner) found(key []byte, same string) *DecodeError {
	s.path = append(s.path, pathSeg{key: true, text: string(key)})
	return duplicateError("", same)
}

// array reads an array at s.pos.
func (s *dupScanner) array(sh *shape, depth int) *DecodeError {
	elem := anyShape
	if sh.kind == shapeList || sh.kind == shapeMap {
		elem = sh.elemShape()
	}
	s.pos = s.space(s.pos + 1)
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		return nil
	}
	for i := 0; s.pos < len(s.data); i++ {
		if de := s.value(elem, depth+1); de != nil {
			s.path = append(s.path, pathSeg{index: i})
			return de
		}
		s.pos = s.space(s.pos)
		if s.pos >= len(s.data) || s.data[s.pos] != ',' {
			break
		}
		s.pos = s.space(s.pos + 1)
	}
	s.pos++ // ']'
	return nil
}

// str returns the end (past the closing quote) of the string starting at
// i, and whether it holds an escape; -1 when it does not end. Short
// strings (keys) are read byte by byte, longer ones by IndexByte.
func (s *dupScanner) str(i int) (int, bool) {
	escaped := false
	i++
	for n := min(len(s.data), i+16); i < n; i++ {
		switch s.data[i] {
		case '"':
			return i + 1, escaped
		case '\\':
			escaped = true
			i++
			n = min(len(s.data), n+1)
		}
	}
	for i < len(s.data) {
		q := bytes.IndexByte(s.data[i:], '"')
		if q < 0 {
			break
		}
		b := bytes.IndexByte(s.data[i:i+q], '\\')
		if b < 0 {
			return i + q + 1, escaped
		}
		escaped = true
		i += b + 2 // the backslash and the character it escapes
	}
	return -1, escaped
}

// scalar returns the end of the number or literal starting at i.
func (s *dupScanner) scalar(i int) int {
	for i < len(s.data) {
		switch s.data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skip returns the end of the value starting at i, looking at nothing
// inside it.
func (s *dupScanner) skip(i int) int {
	if i >= len(s.data) {
		return i
	}
	switch s.data[i] {
	case '"':
		if end, _ := s.str(i); end >= 0 {
			return end
		}
		return len(s.data)
	case '{', '[':
	default:
		return s.scalar(i)
	}
	depth := 0
	for i < len(s.data) {
		switch s.data[i] {
		case '"':
			if i, _ = s.str(i); i < 0 {
				return len(s.data)
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

// isASCII reports whether b is ASCII text.
func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// canonicalKey is the key a quoted JSON string names, as encoding/json
// reads it: escapes resolved, bytes that are not UTF-8 replaced (so two
// keys it would take as one compare equal).
func canonicalKey(quoted []byte) []byte {
	if isASCII(quoted) && bytes.IndexByte(quoted, '\\') < 0 {
		return quoted[1 : len(quoted)-1]
	}
	var k string
	if err := json.Unmarshal(quoted, &k); err != nil {
		return quoted
	}
	return []byte(k)
}

// The shapes of values, as far as duplicate keys go.
const (
	shapeAny    = iota // anything: keys compared as text, all the way down
	shapeRaw           // a json.RawMessage: as shapeAny, or skipped
	shapeStruct        // a struct decoded field by field
	shapeMap           // a map: keys compared as text, values of elem
	shapeList          // a slice or array of elem
)

// shape is how a Go type takes a JSON value.
type shape struct {
	kind int
	elem reflect.Type // shapeMap, shapeList
	info *structInfo  // shapeStruct
}

// elemShape is the shape of a map's or a list's elements.
func (sh *shape) elemShape() *shape { return shapeOf(sh.elem) }

var (
	anyShape = &shape{kind: shapeAny}
	rawShape = &shape{kind: shapeRaw}
	shapes   sync.Map // reflect.Type → *shape
	rawType  = reflect.TypeFor[json.RawMessage]()
	anyIface = reflect.TypeFor[any]()
)

// shapeOf is the shape of t (nil: anything), cached per type.
func shapeOf(t reflect.Type) *shape {
	if t == nil || t == anyIface {
		return anyShape
	}
	if sh, ok := shapes.Load(t); ok {
		return sh.(*shape)
	}
	sh := makeShape(t)
	shapes.Store(t, sh)
	return sh
}

func makeShape(t reflect.Type) *shape {
	if t == rawType {
		return rawShape
	}
	for t.Kind() == reflect.Pointer {
		if t.Elem() == rawType {
			return rawShape
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Implements(jsonUnmarshaler) {
		return anyShape // it decodes itself
	}
	switch t.Kind() {
	case reflect.Struct:
		return &shape{kind: shapeStruct, info: newStructInfo(t)}
	case reflect.Map:
		return &shape{kind: shapeMap, elem: t.Elem()}
	case reflect.Slice, reflect.Array:
		return &shape{kind: shapeList, elem: t.Elem()}
	}
	return anyShape
}

// structInfo is the JSON fields of a struct type, as encoding/json
// finds them.
type structInfo struct {
	names  []string // each field's JSON name
	types  []reflect.Type
	shapes []atomic.Pointer[shape] // each field's shape, once looked up
	byName map[string]int
}

// shape is the shape of field f.
func (si *structInfo) shape(f int) *shape {
	if sh := si.shapes[f].Load(); sh != nil {
		return sh
	}
	sh := shapeOf(si.types[f])
	si.shapes[f].Store(sh)
	return sh
}

func newStructInfo(t reflect.Type) *structInfo {
	si := &structInfo{byName: map[string]int{}}
	var add func(t reflect.Type, depth int)
	add = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct && depth < 8 {
					add(et, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, seen := si.byName[name]; seen {
				continue
			}
			si.byName[name] = len(si.names)
			si.names = append(si.names, name)
			si.types = append(si.types, f.Type)
		}
	}
	add(t, 0)
	si.shapes = make([]atomic.Pointer[shape], len(si.names))
	return si
}

// lookup finds the field key names: by its JSON name, else ignoring case
// (as encoding/json does).
func (si *structInfo) lookup(key []byte) (int, bool) {
	if i, ok := si.byName[string(key)]; ok {
		return i, true
	}
	for i, n := range si.names {
		if bytes.EqualFold([]byte(n), key) {
			return i, true
		}
	}
	return 0, false
}
