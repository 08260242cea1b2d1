package contracts

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestCompactPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		err            error
	}{
		{"big integer", `12345678901234567890`, `12345678901234567890`, nil},
		{"negative zero", ` -0 `, `-0`, nil},
		{"39 digits", `123456789012345678901234567890123456789`, `123456789012345678901234567890123456789`, nil},
		{"beyond float64", `1e400`, `1e400`, nil},
		{"exponent forms", `[1E+2, 1e-7, 2.50, -0.0]`, `[1E+2,1e-7,2.50,-0.0]`, nil},
		{"escapes kept", "{ \"b\" : \"\\u00e9 \\/ <&> \u2028\" }", "{\"b\":\"\\u00e9 \\/ <&> \u2028\"}", nil},
		{"lone surrogate escape", `"\ud800"`, `"\ud800"`, nil},
		{"nested, spaced", "[ [ 1 ,\n\t[ ] ] , { } ]", `[[1,[]],{}]`, nil},
		{"duplicate keys kept", `{"a":1, "a":2}`, `{"a":1,"a":2}`, nil},
		{"not UTF-8", "\"caf\xe9\"", "", ErrNotUTF8},
		{"surrogate in UTF-8", "\"\xed\xa0\x80\"", "", ErrNotUTF8},
		{"two values", `1 2`, "", ErrNotJSON},
		{"empty", ``, "", ErrNotJSON},
		{"NaN", `NaN`, "", ErrNotJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := CompactPayload([]byte(tt.in))
			if !errors.Is(err, tt.err) || string(got) != tt.want {
				t.Fatalf("CompactPayload(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestEncodeJSONKeepsPayloads(t *testing.T) {
	t.Parallel()
	spec := JobSpec{ID: "j1", Kind: "a", Payload: json.RawMessage("{\"h\":\"<a>&\u2028\",\"n\":12345678901234567890}")}
	got, err := EncodeJSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"j1","tenant":"","kind":"a","attempt":0,"payload":{"h":"<a>&` + "\u2028" + `","n":12345678901234567890},"priority":0}`
	if string(got) != want {
		t.Fatalf("EncodeJSON = %s\nwant          %s", got, want)
	}
}
