package contracts

import "fmt"

// JobState is where a job is in its life. The zero value is not a state.
type JobState string

// The job states. Succeeded, failed and cancelled are final.
const (
	StatePending   JobState = "pending"
	StateRunning   JobState = "running"
	StateSucceeded JobState = "succeeded"
	StateFailed    JobState = "failed"
	StateCancelled JobState = "cancelled"
)

// AllStates lists every state in lifecycle order.
var AllStates = []JobState{StatePending, StateRunning, StateSucceeded, StateFailed, StateCancelled}

// ActiveStates are the states counted against the admission cap.
var ActiveStates = []JobState{StatePending, StateRunning}

// transitions is the whole state machine: from → allowed targets.
// pending → pending is a re-dispatch (claim, overflow, lost message) and
// running → pending a requeue after the attempt went stale.
var transitions = map[JobState][]JobState{
	StatePending: {StatePending, StateRunning, StateFailed, StateCancelled, StateSucceeded},
	StateRunning: {StateRunning, StatePending, StateSucceeded, StateFailed, StateCancelled},
}

// CanTransition reports whether a job may move from one state to another.
// pending → succeeded is allowed because a fast handler's result can arrive
// before the acceptance of its own attempt was recorded.
func CanTransition(from, to JobState) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Final reports whether no transition leaves the state.
func (s JobState) Final() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Active reports whether the state counts against the admission cap.
func (s JobState) Active() bool { return s == StatePending || s == StateRunning }

// Valid reports whether s is one of the five states.
func (s JobState) Valid() bool {
	for _, v := range AllStates {
		if v == s {
			return true
		}
	}
	return false
}

// ParseJobState turns user input into a state, or says why it cannot.
func ParseJobState(s string) (JobState, error) {
	st := JobState(s)
	if !st.Valid() {
		return "", fmt.Errorf("unknown state %q (want one of pending, running, succeeded, failed, cancelled)", s)
	}
	return st, nil
}
