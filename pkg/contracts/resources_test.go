package contracts

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "0", want: 0},
		{in: "1000", want: 1000},
		{in: "512MiB", want: 512 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "1.5GiB", want: 3 << 29},
		{in: " 64 KiB ", want: 64 << 10},
		{in: "2TiB", want: 2 << 40},
		{in: "7B", want: 7},
		{in: "", err: "not an amount of memory"},
		{in: "MiB", err: "not an amount of memory"},
		{in: "-1MiB", err: "not an amount of memory"},
		{in: "1MB", err: "not an amount of memory"},
		{in: "1e9", err: "not an amount of memory"},
		{in: "1.2.3", err: "not an amount of memory"},
		{in: "2048TiB", err: "is more than 1024TiB"},
		{in: "99999999999999999999", err: "is more than 1024TiB"},
	} {
		got, err := ParseMemory(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestFormatMemory(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "0", 1000: "1000", 1 << 20: "1MiB", 1536 << 10: "1536KiB", 3 << 30: "3GiB", 1 << 40: "1TiB"} {
		require.Equal(t, want, FormatMemory(in))
		back, err := ParseMemory(want)
		require.NoError(t, err)
		require.Equal(t, in, back)
	}
}

func TestParseResources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Resources
		err  string
	}{
		{in: "cpu=2,memory=1GiB", want: Resources{CPU: 2, Memory: 1 << 30}},
		{in: " cpu = 0.5 ", want: Resources{CPU: 0.5}},
		{in: "memory=256MiB", want: Resources{Memory: 256 << 20}},
		{in: "", want: Resources{}},
		{in: "cpu=-1", err: "resources.cpu: -1 is negative"},
		{in: "cpu=NaN", err: "resources.cpu: must be a finite number"},
		{in: "cpu=5000", err: "resources.cpu: 5000 cores is more than 4096"},
		{in: "cpu=x", err: `cpu: "x" is not a number of cores`},
		{in: "memory=lots", err: "memory: \"lots\" is not an amount"},
		{in: "gpu=1", err: `"gpu" is not a resource`},
		{in: "cpu", err: "want name=value"},
		{in: "cpu=1,cpu=2", err: "cpu is given twice"},
	} {
		got, err := ParseResources(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestResourcesJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Resources
		err  string
	}{
		{in: `{"cpu":0.5,"memory":"512MiB"}`, want: Resources{CPU: 0.5, Memory: 512 << 20}},
		{in: `{"memory":1048576}`, want: Resources{Memory: 1 << 20}},
		{in: `{"memory":"1000"}`, want: Resources{Memory: 1000}},
		{in: `{}`, want: Resources{}},
		{in: `{"cpu":null,"memory":null}`, want: Resources{}},
		{in: `{"cpu":-0.5}`, err: "resources.cpu: -0.5 is negative"},
		{in: `{"cpu":1e9}`, err: "resources.cpu: 1e+09 cores is more than 4096"},
		{in: `{"cpu":"2"}`, err: "resources.cpu: expected a number, got a string"},
		{in: `{"memory":-1}`, err: "resources.memory: -1 bytes is negative"},
		{in: `{"memory":1.5}`, err: "resources.memory: expected a byte count"},
		{in: `{"memory":"1 PB"}`, err: "resources.memory: \"1 PB\" is not an amount"},
		{in: `{"memory":"4096TiB"}`, err: "resources.memory: \"4096TiB\" is more than"},
		{in: `{"memory":true}`, err: "resources.memory: expected a byte count"},
		{in: `{"gpu":1}`, err: "resources.gpu: unknown field"},
		{in: `[]`, err: "resources: expected"},
	} {
		var v struct {
			Resources Resources `json:"resources"`
		}
		err := decodeStrict([]byte(`{"resources":`+tc.in+`}`), &v)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			var de *DecodeError
			require.True(t, errors.As(err, &de), "%s: %T", tc.in, err)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, v.Resources, tc.in)
	}
	out, err := json.Marshal(Resources{CPU: 0.5, Memory: 512 << 20})
	require.NoError(t, err)
	require.JSONEq(t, `{"cpu":0.5,"memory":"512MiB"}`, string(out))
	out, err = json.Marshal(Resources{})
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(out))
}

func TestResourcesArithmetic(t *testing.T) {
	t.Parallel()
	capacity := Resources{CPU: 2, Memory: 2 << 30}
	one := Resources{CPU: 1, Memory: 512 << 20}
	two := Resources{CPU: 2, Memory: 512 << 20}
	for _, tc := range []struct {
		name     string
		running  []Resources
		offer    Resources
		wantFits bool
	}{
		{"empty worker takes a 2-cpu job", nil, two, true},
		{"second 1-cpu job fits", []Resources{one}, one, true},
		{"third 1-cpu job does not", []Resources{one, one}, one, false},
		{"2-cpu job beside a 1-cpu one does not", []Resources{one}, two, false},
		{"memory bounds too", []Resources{{Memory: 2 << 30}}, Resources{Memory: 1}, false},
		{"a tenth at a time sums exactly", []Resources{{CPU: 0.1}, {CPU: 0.2}, {CPU: 1.4}}, Resources{CPU: 0.3}, true},
		{"nothing declared always fits", []Resources{capacity}, Resources{}, true},
	} {
		free := capacity
		for _, r := range tc.running {
			free = free.Sub(r)
		}
		require.Equal(t, tc.wantFits, tc.offer.Fits(free), tc.name)
	}
	sum := Resources{}.Add(one).Add(two)
	require.Equal(t, Resources{CPU: 3, Memory: 1 << 30}, sum)
	require.Equal(t, Resources{CPU: -1, Memory: 1 << 30}, one.Sub(two).Add(Resources{Memory: 1 << 30}))
	require.Equal(t, Resources{Memory: 1 << 30}, one.Sub(two).Add(Resources{Memory: 1 << 30}).Clamp())
	require.Equal(t, Resources{CPU: 0.5, Memory: 512 << 20}, capacity.Div(4))
	require.Equal(t, capacity, capacity.Div(0))
	require.Equal(t, "cpu=0.5,memory=512MiB", capacity.Div(4).String())
	require.True(t, Resources{}.IsZero())
}

func TestResourcesOnMessages(t *testing.T) {
	t.Parallel()
	offer, err := DecodeOffer([]byte(`{"job":{"id":"j1","tenant":"t","kind":"exec","attempt":1,"resources":{"cpu":1,"memory":"64MiB"}}}`))
	require.NoError(t, err)
	require.Equal(t, &Resources{CPU: 1, Memory: 64 << 20}, offer.Job.Resources)
	_, err = DecodeOffer([]byte(`{"job":{"id":"j1","tenant":"t","kind":"exec","attempt":1,"resources":{"cpu":-1}}}`))
	require.ErrorContains(t, err, "job.resources.cpu: -1 is negative")

	_, err = DecodeResult([]byte(`{"job_id":"j1","attempt":1,"worker_id":"w","state":"failed","error":"resources: memory","usage":{"mechanism":"cgroup-v1","peak_memory":67108864,"cpu_seconds":0.25}}`))
	require.NoError(t, err)
	_, err = DecodeResult([]byte(`{"job_id":"j1","attempt":1,"worker_id":"w","state":"failed","error":"resources: memory","usage":{"mechanism":"magic","peak_memory":1,"cpu_seconds":0}}`))
	require.ErrorContains(t, err, `unknown mechanism "magic"`)
	require.Equal(t, ClassResources, ClassOf("resources: went past its memory"))

	a, err := DecodeAnnounce([]byte(`{"worker_id":"w","kinds":["exec"],"capacity":2,"in_flight":1,"interval_ms":5,"resources":{"cpu":2,"memory":"1GiB"},"free_resources":{"cpu":1,"memory":"512MiB"}}`))
	require.NoError(t, err)
	require.Equal(t, &Resources{CPU: 1, Memory: 512 << 20}, a.FreeResources)
	// An announcement without resources (an older worker) still reads.
	a, err = DecodeAnnounce([]byte(`{"worker_id":"w","kinds":["exec"],"capacity":2,"in_flight":1,"interval_ms":5}`))
	require.NoError(t, err)
	require.Nil(t, a.Resources)
	// The seq stays last, so announcements still split (SplitAnnounce).
	data, err := json.Marshal(Announce{WorkerID: "w", Resources: &Resources{CPU: 1}, FreeResources: &Resources{CPU: 1}, Seq: 7})
	require.NoError(t, err)
	_, seq, ok := SplitAnnounce(nil, data)
	require.True(t, ok)
	require.EqualValues(t, 7, seq)
}

// FuzzResources: whatever the decoder accepts is a valid declaration that
// survives encoding and decoding again unchanged; the configuration form
// reads what String writes.
func FuzzResources(f *testing.F) {
	for _, s := range []string{`{"cpu":0.5,"memory":"512MiB"}`, `{"memory":1048576}`, `{"memory":"1.5GiB"}`, `{}`, `{"cpu":-1}`, `{"memory":"x"}`, `[]`, `{"cpu":1e308}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Resources
		if err := decodeStrict(data, &r); err != nil {
			return
		}
		if err := r.Validate("resources"); err != nil {
			t.Fatalf("accepted an invalid declaration %s: %v", data, err)
		}
		if math.IsNaN(r.CPU) || r.Memory < 0 {
			t.Fatalf("accepted %s as %+v", data, r)
		}
		checkRoundTrip(t, r, func(b []byte) (Resources, error) {
			var again Resources
			return again, decodeStrict(b, &again)
		}, func(a, b Resources) bool { return a == b })
		if !strings.Contains(r.String(), "cpu=") {
			t.Fatalf("String %q", r.String())
		}
		back, err := ParseResources(r.String())
		if err != nil || back.Memory != r.Memory {
			t.Fatalf("ParseResources(%q) = %+v, %v; want %+v", r.String(), back, err, r)
		}
	})
}
