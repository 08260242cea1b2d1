package contracts

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCheckMessageSize(t *testing.T) {
	t.Parallel()
	job := func(payloadBytes int) Job {
		p, _ := json.Marshal(strings.Repeat("a", payloadBytes))
		return Job{ID: "01a2", Tenant: "acme", Kind: "k", State: StatePending, Payload: p}
	}
	const max = 64 << 10
	tests := []struct {
		name    string
		job     Job
		max     int64
		wantErr bool
	}{
		{"small job", job(10), max, false},
		{"fits with the envelope", job(max - MessageEnvelope - 2048), max, false},
		{"payload alone fits, with the envelope not", job(max - MessageEnvelope/2), max, true},
		{"larger than the bus", job(max), max, true},
		{"no limit known", job(max * 4), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckMessageSize(tc.job, tc.max)
			if (err != nil) != tc.wantErr {
				t.Fatalf("CheckMessageSize: %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "payload: ") {
				t.Fatalf("error %q does not name the payload", err)
			}
		})
	}
}

func TestSpecCarriesWhatAWorkerNeeds(t *testing.T) {
	t.Parallel()
	j := Job{ID: "id", Tenant: "t", Kind: "k", Claim: 3, Payload: json.RawMessage(`{"a":1}`), Key: "key", Priority: 7, State: StateRunning}
	s := j.Spec()
	if s.ID != "id" || s.Tenant != "t" || s.Kind != "k" || s.Claim != 3 || string(s.Payload) != `{"a":1}` || s.Key != "key" || s.Priority != 7 {
		t.Fatalf("Spec() = %+v", s)
	}
}

func TestProgressPercentIsRoundedToATenth(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{30.0003138: 30, 12.345: 12.3, 99.96: 100, 0: 0, 66.66666: 66.7} {
		if got := RoundPercent(in); got != want {
			t.Fatalf("RoundPercent(%v) = %v, want %v", in, got, want)
		}
	}
	m, err := DecodeProgressReport([]byte(`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":30.0003138}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Progress.Percent != 30 {
		t.Fatalf("decoded percent %v, want 30", m.Progress.Percent)
	}
}

func TestStaleRule(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	const threshold = 30 * time.Second
	tests := []struct {
		name  string
		job   Job
		stale bool
	}{
		{"fresh heartbeat", Job{StartedAt: ago(time.Minute), HeartbeatAt: ago(time.Second)}, false},
		{"heartbeat exactly the threshold old", Job{StartedAt: ago(time.Minute), HeartbeatAt: ago(threshold)}, true},
		{"no heartbeat yet: the start counts", Job{StartedAt: ago(10 * time.Second)}, false},
		{"no heartbeat, old start", Job{StartedAt: ago(time.Minute)}, true},
		{"no sign of life at all", Job{}, true},
	}
	for _, tc := range tests {
		if got := tc.job.Stale(now, threshold); got != tc.stale {
			t.Errorf("%s: Stale = %v, want %v", tc.name, got, tc.stale)
		}
	}
	for _, r := range RequeueReasons {
		if !r.Valid() {
			t.Errorf("%s is not valid", r)
		}
	}
	if RequeueReason("bored").Valid() {
		t.Error("an unknown reason is valid")
	}
}
