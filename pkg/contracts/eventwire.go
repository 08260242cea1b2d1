package contracts

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The event's wire form, written without reflection: two events go out
// per job (started, ended), so encoding/json's reflection over Event was a
// visible share of the scheduler's CPU per job. The bytes are exactly
// json.Marshal's (the tests compare them), so readers see no change.

// AppendEvent appends ev encoded as JSON to dst, byte for byte what
// json.Marshal(ev) writes. It fails only where json.Marshal would (a time
// outside years 0–9999, a progress percent that is not a number).
func AppendEvent(dst []byte, ev Event) ([]byte, error) {
	if y := ev.At.Year(); y < 0 || y > 9999 {
		return dst, &json.MarshalerError{Type: nil, Err: errYearRange}
	}
	dst = slices.Grow(dst, 160+len(ev.JobID)+len(ev.Tenant)+len(ev.Kind)+len(ev.Parent)+len(ev.Worker)+len(ev.Error))
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, ev.Type)
	dst = append(dst, `,"job_id":`...)
	dst = appendJSONString(dst, ev.JobID)
	dst = append(dst, `,"tenant":`...)
	dst = appendJSONString(dst, ev.Tenant)
	if ev.Kind != "" {
		dst = append(dst, `,"kind":`...)
		dst = appendJSONString(dst, ev.Kind)
	}
	if ev.Parent != "" {
		dst = append(dst, `,"parent":`...)
		dst = appendJSONString(dst, ev.Parent)
	}
	if ev.State != "" {
		dst = append(dst, `,"state":`...)
		dst = appendJSONString(dst, string(ev.State))
	}
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(ev.Attempt), 10)
	dst = append(dst, `,"claim":`...)
	dst = strconv.AppendInt(dst, ev.Claim, 10)
	if ev.Worker != "" {
		dst = append(dst, `,"worker":`...)
		dst = appendJSONString(dst, ev.Worker)
	}
	if ev.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendJSONString(dst, ev.Error)
	}
	if ev.Progress != nil {
		p, err := json.Marshal(ev.Progress)
		if err != nil {
			return dst, err
		}
		dst = append(dst, `,"progress":`...)
		dst = append(dst, p...)
	}
	dst = append(dst, `,"at":"`...)
	dst = ev.At.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, `"}`...), nil
}

// errYearRange is AppendEvent's error for a time JSON cannot carry.
var errYearRange = jsonError("event time: year outside of range [0,9999]")

// jsonError is an error of a fixed message.
type jsonError string

func (e jsonError) Error() string { return string(e) }

// appendJSONString appends s as a JSON string, as encoding/json writes it:
// a string of plain printable ASCII as it is, anything else (escapes, the
// HTML characters json escapes, non-ASCII) through encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
