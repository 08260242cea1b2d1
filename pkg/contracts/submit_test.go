package contracts

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	testNow    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	testLimits = Limits{MaxDispatchDeadline: time.Hour, DefaultMaxAttempts: 3}
)

func TestSubmitRequestValidate(t *testing.T) {
	t.Parallel()
	defaultDeadline := testNow.Add(testLimits.MaxDispatchDeadline)
	tests := []struct {
		name      string
		req       SubmitRequest
		lim       Limits
		want      Submission // checked when wantField is ""
		wantField string
		wantIn    string // substring of the reason
	}{
		{
			name: "minimal gets defaults",
			req:  SubmitRequest{Kind: "email"},
			want: Submission{Kind: "email", MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		{
			name: "every field",
			req: SubmitRequest{Kind: "img.resize_v2-x", Payload: json.RawMessage(`{"w":10}`), Key: "order-42 ✓",
				Priority: 9, Deadline: "30m", MaxAttempts: 100},
			want: Submission{Kind: "img.resize_v2-x", Payload: json.RawMessage(`{"w":10}`), Key: "order-42 ✓",
				Priority: 9, MaxAttempts: 100, DispatchDeadline: testNow.Add(30 * time.Minute)},
		},
		{
			name: "null payload is valid JSON",
			req:  SubmitRequest{Kind: "a", Payload: json.RawMessage(`null`)},
			want: Submission{Kind: "a", Payload: json.RawMessage(`null`), MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		// kind
		{name: "kind missing", req: SubmitRequest{}, wantField: "kind", wantIn: "required"},
		{name: "kind uppercase", req: SubmitRequest{Kind: "Email"}, wantField: "kind"},
		{name: "kind leading dash", req: SubmitRequest{Kind: "-email"}, wantField: "kind"},
		{name: "kind leading dot", req: SubmitRequest{Kind: ".email"}, wantField: "kind"},
		{name: "kind with space", req: SubmitRequest{Kind: "send email"}, wantField: "kind"},
		{name: "kind with slash", req: SubmitRequest{Kind: "a/b"}, wantField: "kind"},
		{name: "kind 65 chars", req: SubmitRequest{Kind: strings.Repeat("k", 65)}, wantField: "kind"},
		{
			name: "kind 64 chars",
			req:  SubmitRequest{Kind: strings.Repeat("k", 64)},
			want: Submission{Kind: strings.Repeat("k", 64), MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		// key
		{
			name: "key 256 bytes",
			req:  SubmitRequest{Kind: "a", Key: strings.Repeat("k", MaxKeyLen)},
			want: Submission{Kind: "a", Key: strings.Repeat("k", MaxKeyLen), MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		{name: "key 257 bytes", req: SubmitRequest{Kind: "a", Key: strings.Repeat("k", MaxKeyLen+1)}, wantField: "key", wantIn: "longer"},
		{name: "key 256 bytes of multibyte runes over", req: SubmitRequest{Kind: "a", Key: strings.Repeat("é", 129)}, wantField: "key", wantIn: "longer"},
		{name: "key with NUL", req: SubmitRequest{Kind: "a", Key: "a\x00b"}, wantField: "key", wantIn: "printable"},
		{name: "key with newline", req: SubmitRequest{Kind: "a", Key: "a\nb"}, wantField: "key", wantIn: "printable"},
		{name: "key with tab", req: SubmitRequest{Kind: "a", Key: "a\tb"}, wantField: "key", wantIn: "printable"},
		{name: "key invalid UTF-8", req: SubmitRequest{Kind: "a", Key: "a\xffb"}, wantField: "key", wantIn: "printable"},
		{name: "key replacement char", req: SubmitRequest{Kind: "a", Key: "a\uFFFDb"}, wantField: "key", wantIn: "printable"},
		{name: "key zero width space", req: SubmitRequest{Kind: "a", Key: "a\u200bb"}, wantField: "key", wantIn: "printable"},
		// priority
		{
			name: "priority min",
			req:  SubmitRequest{Kind: "a", Priority: MinPriority},
			want: Submission{Kind: "a", Priority: MinPriority, MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		{name: "priority below", req: SubmitRequest{Kind: "a", Priority: -1}, wantField: "priority"},
		{name: "priority above", req: SubmitRequest{Kind: "a", Priority: MaxPriority + 1}, wantField: "priority"},
		// max_attempts
		{
			name: "max_attempts 1",
			req:  SubmitRequest{Kind: "a", MaxAttempts: 1},
			want: Submission{Kind: "a", MaxAttempts: 1, DispatchDeadline: defaultDeadline},
		},
		{
			name: "max_attempts default when the limit has none",
			req:  SubmitRequest{Kind: "a"},
			lim:  Limits{MaxDispatchDeadline: time.Hour},
			want: Submission{Kind: "a", MaxAttempts: 1, DispatchDeadline: defaultDeadline},
		},
		{
			name: "max_attempts default when the limit is negative",
			req:  SubmitRequest{Kind: "a"},
			lim:  Limits{MaxDispatchDeadline: time.Hour, DefaultMaxAttempts: -4},
			want: Submission{Kind: "a", MaxAttempts: 1, DispatchDeadline: defaultDeadline},
		},
		{name: "max_attempts negative", req: SubmitRequest{Kind: "a", MaxAttempts: -1}, wantField: "max_attempts"},
		{name: "max_attempts too many", req: SubmitRequest{Kind: "a", MaxAttempts: MaxMaxAttempts + 1}, wantField: "max_attempts"},
		// fan-out
		{
			name: "items with the default window",
			req:  SubmitRequest{Kind: "a", Items: json.RawMessage(` [1, {"a": 2} ,"x"] `)},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: defaultDeadline, Concurrency: DefaultWindow,
				Items: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`{"a":2}`), json.RawMessage(`"x"`)}},
		},
		{
			name: "items keep every number and string as written",
			req: SubmitRequest{Kind: "a", Items: json.RawMessage("[12345678901234567890, -0,\n" +
				"123456789012345678901234567890123456789, 1.5e300, 1e400, { \"a\" : 1e-7 , \"b\" : \"\\u00e9<&\u2028\" }," +
				" [ [ 1 , [ 2.50 , [ -0.0 ] ] ] , [ ] ]]")},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: defaultDeadline, Concurrency: DefaultWindow,
				Items: []json.RawMessage{json.RawMessage(`12345678901234567890`), json.RawMessage(`-0`),
					json.RawMessage(`123456789012345678901234567890123456789`), json.RawMessage(`1.5e300`), json.RawMessage(`1e400`),
					json.RawMessage("{\"a\":1e-7,\"b\":\"\\u00e9<&\u2028\"}"), json.RawMessage(`[[1,[2.50,[-0.0]]],[]]`)}},
		},
		{
			name: "items with a window and fail_fast",
			req:  SubmitRequest{Kind: "a", Items: json.RawMessage(`[null]`), Concurrency: MaxWindow, FailFast: true},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: defaultDeadline, Concurrency: MaxWindow, FailFast: true,
				Items: []json.RawMessage{json.RawMessage(`null`)}},
		},
		{name: "items null", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`null`)}, wantField: "items", wantIn: "array"},
		{name: "items object", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`{"a":1}`)}, wantField: "items", wantIn: "array"},
		{name: "items empty", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`[]`)}, wantField: "items", wantIn: "empty"},
		{name: "items invalid", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`[1,`)}, wantField: "items", wantIn: "JSON"},
		{name: "items too many", req: SubmitRequest{Kind: "a", Items: json.RawMessage("[" + strings.Repeat("1,", MaxItems) + "1]")}, wantField: "items", wantIn: "at most"},
		{name: "item not UTF-8", req: SubmitRequest{Kind: "a", Items: json.RawMessage("[1,\"ok\",\"\xff\"]")}, wantField: "items[2]", wantIn: "UTF-8"},
		{name: "item with a lone surrogate byte", req: SubmitRequest{Kind: "a", Items: json.RawMessage("[{\"a\":\"\xed\xa0\x80\"}]")}, wantField: "items[0]", wantIn: "UTF-8"},
		{name: "items with payload", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`[1]`), Payload: json.RawMessage(`{}`)}, wantField: "payload"},
		{name: "window over", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`[1]`), Concurrency: MaxWindow + 1}, wantField: "concurrency"},
		{name: "window negative", req: SubmitRequest{Kind: "a", Items: json.RawMessage(`[1]`), Concurrency: -1}, wantField: "concurrency"},
		{name: "concurrency without items", req: SubmitRequest{Kind: "a", Concurrency: 2}, wantField: "concurrency", wantIn: "items"},
		{name: "fail_fast without items", req: SubmitRequest{Kind: "a", FailFast: true}, wantField: "fail_fast", wantIn: "items"},
		// payload
		{name: "payload invalid", req: SubmitRequest{Kind: "a", Payload: json.RawMessage(`{"a":`)}, wantField: "payload", wantIn: "JSON"},
		{name: "payload two values", req: SubmitRequest{Kind: "a", Payload: json.RawMessage(`1 2`)}, wantField: "payload"},
		{name: "payload not UTF-8", req: SubmitRequest{Kind: "a", Payload: json.RawMessage("{\"a\":\"\xc3\"}")}, wantField: "payload", wantIn: "UTF-8"},
		{
			name: "payload compacted, numbers and strings as written",
			req:  SubmitRequest{Kind: "a", Payload: json.RawMessage(" {\"n\": 12345678901234567890,\n \"z\": -0, \"s\": \"\\ud83d\\ude00 \\/\"} ")},
			want: Submission{Kind: "a", Payload: json.RawMessage(`{"n":12345678901234567890,"z":-0,"s":"\ud83d\ude00 \/"}`), MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		// deadline
		{
			name: "deadline duration",
			req:  SubmitRequest{Kind: "a", Deadline: "90s"},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: testNow.Add(90 * time.Second)},
		},
		{
			name: "deadline duration at the limit",
			req:  SubmitRequest{Kind: "a", Deadline: "1h"},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: defaultDeadline},
		},
		{
			name: "deadline RFC 3339",
			req:  SubmitRequest{Kind: "a", Deadline: testNow.Add(10 * time.Minute).Format(time.RFC3339)},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: testNow.Add(10 * time.Minute)},
		},
		{
			name: "deadline RFC 3339 with offset and fraction",
			req:  SubmitRequest{Kind: "a", Deadline: "2030-01-02T05:14:05.5+02:00"},
			want: Submission{Kind: "a", MaxAttempts: 3, DispatchDeadline: testNow.Add(10*time.Minute + 500*time.Millisecond)},
		},
		{name: "deadline duration too far", req: SubmitRequest{Kind: "a", Deadline: "1h1s"}, wantField: "deadline", wantIn: "later than"},
		{name: "deadline RFC 3339 too far", req: SubmitRequest{Kind: "a", Deadline: testNow.Add(2 * time.Hour).Format(time.RFC3339)}, wantField: "deadline", wantIn: "later than"},
		{name: "deadline RFC 3339 in the past", req: SubmitRequest{Kind: "a", Deadline: testNow.Add(-time.Minute).Format(time.RFC3339)}, wantField: "deadline", wantIn: "past"},
		{name: "deadline RFC 3339 now", req: SubmitRequest{Kind: "a", Deadline: testNow.Format(time.RFC3339)}, wantField: "deadline", wantIn: "past"},
		{name: "deadline zero duration", req: SubmitRequest{Kind: "a", Deadline: "0s"}, wantField: "deadline", wantIn: "positive"},
		{name: "deadline negative duration", req: SubmitRequest{Kind: "a", Deadline: "-5m"}, wantField: "deadline", wantIn: "positive"},
		{name: "deadline absurd duration", req: SubmitRequest{Kind: "a", Deadline: "876001h"}, wantField: "deadline", wantIn: "absurdly"},
		{name: "deadline garbage", req: SubmitRequest{Kind: "a", Deadline: "tomorrow"}, wantField: "deadline", wantIn: "RFC 3339"},
		{name: "deadline bare number", req: SubmitRequest{Kind: "a", Deadline: "90"}, wantField: "deadline", wantIn: "RFC 3339"},
		{name: "deadline date only", req: SubmitRequest{Kind: "a", Deadline: "2030-01-02"}, wantField: "deadline", wantIn: "RFC 3339"},
		// no dispatch limit configured
		{
			name: "no max dispatch deadline: default is far away",
			req:  SubmitRequest{Kind: "a"},
			lim:  Limits{DefaultMaxAttempts: 2},
			want: Submission{Kind: "a", MaxAttempts: 2, DispatchDeadline: testNow.Add(100 * 365 * 24 * time.Hour)},
		},
		{
			name: "no max dispatch deadline: a year is fine",
			req:  SubmitRequest{Kind: "a", Deadline: "8760h"},
			lim:  Limits{DefaultMaxAttempts: 2},
			want: Submission{Kind: "a", MaxAttempts: 2, DispatchDeadline: testNow.Add(8760 * time.Hour)},
		},
		{
			name: "negative max dispatch deadline means none",
			req:  SubmitRequest{Kind: "a", Deadline: "2100-01-01T00:00:00Z"},
			lim:  Limits{MaxDispatchDeadline: -time.Second, DefaultMaxAttempts: 2},
			want: Submission{Kind: "a", MaxAttempts: 2, DispatchDeadline: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)},
		},
		{
			name:      "no max dispatch deadline: still bounded",
			req:       SubmitRequest{Kind: "a", Deadline: "9999-01-01T00:00:00Z"},
			lim:       Limits{DefaultMaxAttempts: 2},
			wantField: "deadline", wantIn: "later than",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := tt.lim
			if lim == (Limits{}) {
				lim = testLimits
			}
			got, err := tt.req.Validate(testNow, lim)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("Validate() error = %v (%T), want a *FieldError on %q", err, err, tt.wantField)
				}
				if fe.Field != tt.wantField {
					t.Errorf("FieldError.Field = %q, want %q (%v)", fe.Field, tt.wantField, fe)
				}
				if !strings.Contains(fe.Reason, tt.wantIn) {
					t.Errorf("FieldError.Reason = %q, want it to contain %q", fe.Reason, tt.wantIn)
				}
				if fe.Error() != fe.Field+": "+fe.Reason {
					t.Errorf("FieldError.Error() = %q", fe.Error())
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate(): %v", err)
			}
			if !got.DispatchDeadline.Equal(tt.want.DispatchDeadline) {
				t.Errorf("DispatchDeadline = %v, want %v", got.DispatchDeadline, tt.want.DispatchDeadline)
			}
			got.DispatchDeadline, tt.want.DispatchDeadline = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSubmitRequestValidateCopiesPayload(t *testing.T) {
	t.Parallel()
	payload := json.RawMessage(`{"a":1}`)
	s, err := SubmitRequest{Kind: "a", Payload: payload}.Validate(testNow, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	payload[2] = 'b'
	if string(s.Payload) != `{"a":1}` {
		t.Errorf("Submission.Payload = %s shares memory with the request", s.Payload)
	}
}

func TestDecodeSubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    SubmitRequest
		wantErr string // substring; "" means success
	}{
		{name: "minimal", in: `{"kind":"email"}`, want: SubmitRequest{Kind: "email"}},
		{
			name: "every field with whitespace",
			in: " \n\t{\"kind\":\"email\", \"payload\": {\"to\": [1, 2]}, \"key\":\"k1\", \"priority\":3, \"deadline\":\"90s\", " +
				"\"max_attempts\":5, \"items\":[1], \"concurrency\":2}\r\n",
			want: SubmitRequest{Kind: "email", Payload: json.RawMessage(`{"to": [1, 2]}`), Key: "k1", Priority: 3,
				Deadline: "90s", MaxAttempts: 5, Items: json.RawMessage(`[1]`), Concurrency: 2},
		},
		{name: "empty object", in: `{}`, want: SubmitRequest{}},
		{name: "null fields", in: `{"kind":null,"payload":null}`, want: SubmitRequest{Payload: json.RawMessage(`null`)}},
		{name: "empty", in: ``, wantErr: "empty body"},
		{name: "only whitespace", in: " \n\t ", wantErr: "empty body"},
		{name: "array", in: `[{"kind":"a"}]`, wantErr: "JSON object"},
		{name: "null", in: `null`, wantErr: "JSON object"},
		{name: "string", in: `"kind"`, wantErr: "JSON object"},
		{name: "number", in: `42`, wantErr: "JSON object"},
		{name: "unknown field", in: `{"kind":"a","tenant":"t"}`, wantErr: "unknown field"},
		{name: "trailing object", in: `{"kind":"a"} {"kind":"b"}`, wantErr: "trailing"},
		{name: "trailing garbage", in: `{"kind":"a"}x`, wantErr: "trailing"},
		{name: "trailing bracket", in: `{"kind":"a"}]`, wantErr: "trailing"},
		{name: "trailing brace", in: `{"kind":"a"}}`, wantErr: "trailing"},
		{name: "truncated", in: `{"kind":"a"`, wantErr: "not valid JSON: it ends early"},
		{name: "kind not a string", in: `{"kind":1}`, wantErr: "kind: expected a string, got a number"},
		{name: "priority a string", in: `{"kind":"a","priority":"1"}`, wantErr: "priority: expected an integer, got a string"},
		{name: "priority fractional", in: `{"kind":"a","priority":1.5}`, wantErr: "priority: expected an integer, got 1.5"},
		{name: "max_attempts overflows", in: `{"kind":"a","max_attempts":1e100}`, wantErr: "max_attempts: expected an integer, got 1e100"},
		{name: "deadline a number", in: `{"kind":"a","deadline":90}`, wantErr: "deadline: expected a string, got a number"},
		{name: "payload malformed", in: `{"kind":"a","payload":{"a":}}`, wantErr: "not valid JSON: invalid character '}'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeSubmit([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("DecodeSubmit(%q) = %+v, want an error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("DecodeSubmit(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeSubmit(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeSubmit(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			data, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeSubmit(data)
			if err != nil {
				t.Fatalf("DecodeSubmit(%s) of the re-encoded request: %v", data, err)
			}
			if !sameSubmit(got, again) {
				t.Errorf("round trip changed the request: %+v → %s → %+v", got, data, again)
			}
		})
	}
}
