package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestListLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{-1: DefaultListLimit, 0: DefaultListLimit, 1: 1, 500: 500, MaxListLimit: MaxListLimit, MaxListLimit + 1: MaxListLimit} {
		if got := ListLimit(in); got != want {
			t.Errorf("ListLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	c := EncodeCursor(created, "01a2-b")
	at, id, err := DecodeCursor(c)
	if err != nil || !at.Equal(created) || id != "01a2-b" {
		t.Fatalf("DecodeCursor(EncodeCursor) = %v %q %v", at, id, err)
	}
	for _, bad := range []string{"%%%", "bm9jb2xvbg", "MTI6", "eHg6aWQ"} { // not base64, no ':', no id, not a number
		if _, _, err := DecodeCursor(bad); !errors.Is(err, ErrBadCursor) {
			t.Errorf("DecodeCursor(%q) = %v, want ErrBadCursor", bad, err)
		}
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	if GlobalScope != "global" || TenantScope("acme") != "tenant:acme" {
		t.Fatal("scope names changed: the counters already stored use them")
	}
}

func TestCheckNewJob(t *testing.T) {
	t.Parallel()
	ok := contracts.Job{ID: "j1", State: contracts.StatePending}
	if err := CheckNewJob(ok); err != nil {
		t.Fatal(err)
	}
	noID := ok
	noID.ID = ""
	running := ok
	running.State = contracts.StateRunning
	claimed := ok
	claimed.Claim = 1
	if CheckNewJob(noID) == nil {
		t.Error("a job without an id was accepted")
	}
	for _, j := range []contracts.Job{running, claimed} {
		if err := CheckNewJob(j); !errors.Is(err, ErrBadTransition) {
			t.Errorf("CheckNewJob(%s at %d) = %v, want ErrBadTransition", j.State, j.Claim, err)
		}
	}
}
