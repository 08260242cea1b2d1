package contracts

import (
	"strings"
	"testing"
)

func TestCanTransition(t *testing.T) {
	t.Parallel()
	// The documented machine: every pair of the five states, plus a few
	// values that are not states at all.
	allowed := map[JobState]map[JobState]bool{
		StatePending: {StatePending: true, StateRunning: true, StateFailed: true, StateCancelled: true, StateSucceeded: true},
		StateRunning: {StateRunning: true, StatePending: true, StateSucceeded: true, StateFailed: true, StateCancelled: true},
	}
	states := append(append([]JobState(nil), AllStates...), "", "bogus", "Pending")
	for _, from := range states {
		for _, to := range states {
			want := allowed[from][to]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
}

func TestCanTransitionFinalStatesAreTerminal(t *testing.T) {
	t.Parallel()
	for _, from := range AllStates {
		leaves := false
		for _, to := range AllStates {
			leaves = leaves || CanTransition(from, to)
		}
		if leaves == from.Final() {
			t.Errorf("state %q: Final() = %v but has outgoing transitions = %v", from, from.Final(), leaves)
		}
	}
}

func TestStatePredicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state                JobState
		final, active, valid bool
	}{
		{StatePending, false, true, true},
		{StateRunning, false, true, true},
		{StateSucceeded, true, false, true},
		{StateFailed, true, false, true},
		{StateCancelled, true, false, true},
		{"", false, false, false},
		{"unknown", false, false, false},
		{"RUNNING", false, false, false},
		{" pending", false, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.state), func(t *testing.T) {
			t.Parallel()
			if got := tt.state.Final(); got != tt.final {
				t.Errorf("Final() = %v, want %v", got, tt.final)
			}
			if got := tt.state.Active(); got != tt.active {
				t.Errorf("Active() = %v, want %v", got, tt.active)
			}
			if got := tt.state.Valid(); got != tt.valid {
				t.Errorf("Valid() = %v, want %v", got, tt.valid)
			}
		})
	}
}

func TestStateLists(t *testing.T) {
	t.Parallel()
	if len(AllStates) != 5 {
		t.Fatalf("AllStates has %d states, want 5", len(AllStates))
	}
	active := 0
	for _, s := range AllStates {
		if s.Active() {
			active++
		}
		if s.Active() == s.Final() {
			t.Errorf("state %q is both or neither active and final", s)
		}
	}
	if active != len(ActiveStates) {
		t.Errorf("%d active states in AllStates, ActiveStates has %d", active, len(ActiveStates))
	}
	for _, s := range ActiveStates {
		if !s.Active() {
			t.Errorf("ActiveStates holds %q, which is not Active", s)
		}
	}
}

func TestParseJobState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    JobState
		wantErr bool
	}{
		{"pending", StatePending, false},
		{"running", StateRunning, false},
		{"succeeded", StateSucceeded, false},
		{"failed", StateFailed, false},
		{"cancelled", StateCancelled, false},
		{"", "", true},
		{"canceled", "", true},
		{"Pending", "", true},
		{"running ", "", true},
		{"done", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseJobState(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseJobState(%q) = %q, want an error", tt.in, got)
				}
				if got != "" {
					t.Errorf("ParseJobState(%q) returned %q with its error, want \"\"", tt.in, got)
				}
				if !strings.Contains(err.Error(), "unknown state") {
					t.Errorf("error %q does not say the state is unknown", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseJobState(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseJobState(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
