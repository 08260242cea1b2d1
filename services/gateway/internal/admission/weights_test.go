package admission

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Weights
		wantErr string
	}{
		{"", Weights{}, ""},
		{"acme:3,globex:1", Weights{"acme": 3, "globex": 1}, ""},
		{" acme : 0.5 , ", Weights{"acme": 0.5}, ""},
		{"acme", nil, "want tenant:weight"},
		{":3", nil, "want tenant:weight"},
		{"acme:0", nil, "above 0"},
		{"acme:-1", nil, "above 0"},
		{"acme:1001", nil, "at most 1000"},
		{"acme:x", nil, "must be a number"},
		{"acme:1,acme:2", nil, "listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseWeights(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	w, err := ParseWeights("acme:3")
	require.NoError(t, err)
	require.Equal(t, 3.0, w.Of("acme"))
	require.Equal(t, 1.0, w.Of("globex"))
}
