package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestJobError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class ErrorClass
		msg   string
		want  string
	}{
		{ClassCapacity, "no worker", "capacity: no worker"},
		{ClassTimeout, "ran 10m", "timeout: ran 10m"},
		{ClassCancelled, "by user", "cancelled: by user"},
		{ClassStale, "lost 3 workers", "stale: lost 3 workers"},
		{ClassHandler, "boom", "handler: boom"},
		{ClassInput, "", "input: "},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got := JobError(tt.class, tt.msg)
			if got != tt.want {
				t.Fatalf("JobError(%q, %q) = %q, want %q", tt.class, tt.msg, got, tt.want)
			}
			if c := ClassOf(got); c != tt.class {
				t.Errorf("ClassOf(JobError(%q, …)) = %q", tt.class, c)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		msg  string
		want ErrorClass
	}{
		{"capacity: no worker had room", ClassCapacity},
		{"timeout: deadline passed", ClassTimeout},
		{"cancelled: by user", ClassCancelled},
		{"stale: worker vanished", ClassStale},
		{"handler: boom", ClassHandler},
		{"input: bad payload", ClassInput},
		{"input:no space", ClassInput},
		{"handler:", ClassHandler},
		{"", ""},
		{"boom", ""},
		{"handler", ""},
		{"handlers: boom", ""},
		{"Handler: boom", ""},
		{" handler: boom", ""},
		{"panic: handler: boom", ""},
		{"unknown: boom", ""},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			t.Parallel()
			if got := ClassOf(tt.msg); got != tt.want {
				t.Errorf("ClassOf(%q) = %q, want %q", tt.msg, got, tt.want)
			}
		})
	}
}

func TestClassedError(t *testing.T) {
	t.Parallel()
	inner := io.ErrUnexpectedEOF
	ce := &ClassedError{Class: ClassInput, Err: inner}
	if got, want := ce.Error(), "input: "+inner.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if ce.Unwrap() != inner {
		t.Errorf("Unwrap() = %v, want %v", ce.Unwrap(), inner)
	}
	if !errors.Is(ce, io.ErrUnexpectedEOF) {
		t.Error("errors.Is does not see the wrapped error")
	}
	var target *ClassedError
	if !errors.As(fmt.Errorf("outer: %w", ce), &target) || target != ce {
		t.Error("errors.As does not find the ClassedError through a wrapper")
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), "handler: boom"},
		{"plain empty", errors.New(""), "handler: "},
		{"classed input", &ClassedError{Class: ClassInput, Err: errors.New("bad payload")}, "input: bad payload"},
		{"classed timeout", &ClassedError{Class: ClassTimeout, Err: errors.New("too slow")}, "timeout: too slow"},
		{"wrapped classed", fmt.Errorf("step 2: %w", &ClassedError{Class: ClassInput, Err: errors.New("bad")}), "input: bad"},
		{"already classed message", errors.New("cancelled: by user"), "cancelled: by user"},
		{"already classed handler", errors.New("handler: boom"), "handler: boom"},
		{"wrapped classed message", fmt.Errorf("input: %w", errors.New("bad")), "input: bad"},
		{"class later in message", errors.New("step failed: input: bad"), "handler: step failed: input: bad"},
		{"unknown prefix", errors.New("fatal: oops"), "handler: fatal: oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Classify(tt.err)
			if got != tt.want {
				t.Fatalf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
			if tt.err != nil && ClassOf(got) == "" {
				t.Errorf("Classify(%v) = %q has no class", tt.err, got)
			}
		})
	}
}

func TestErrorBodyJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body ErrorBody
		want string
	}{
		{ErrorBody{Error: ErrorDetail{Code: CodeNotFound, Message: "no such job"}}, `{"error":{"code":"not_found","message":"no such job"}}`},
		{ErrorBody{Error: ErrorDetail{Code: CodeTenantCap, Message: "full", Limit: "tenant"}}, `{"error":{"code":"tenant_cap_reached","message":"full","limit":"tenant"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.body.Error.Code, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Marshal = %s, want %s", got, tt.want)
			}
		})
	}
}
