package contracts

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestStatsRecentRejectionsJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s := Stats{RecentRejections: []Rejection{
		{At: at, Tenant: "acme", Limit: LimitIPRate},
		{At: at, Tenant: "acme", Limit: LimitGlobal},
	}}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `"recent_rejections":[` +
		`{"at":"2026-03-04T05:06:07Z","tenant":"acme","limit":"ip_rate"},` +
		`{"at":"2026-03-04T05:06:07Z","tenant":"acme","limit":"global"}]`
	if !strings.Contains(string(data), want) {
		t.Fatalf("stats JSON %s lacks %s", data, want)
	}
	var back Stats
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.RecentRejections, back.RecentRejections) {
		t.Fatalf("round trip: got %+v, want %+v", back.RecentRejections, s.RecentRejections)
	}
}
