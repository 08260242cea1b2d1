package envconfig

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type renamedInner struct {
	Dir string `env:"TEST_NEW_DIR" envOld:"TEST_DIR" envDefault:"./d"`
}

type renamed struct {
	Inner      renamedInner
	Wait       time.Duration `env:"TEST_SVC_WAIT" envOld:"TEST_WAIT" envDefault:"2s"`
	Workers    int           `env:"TEST_SVC_MAX_WORKERS" envOld:"TEST_WORKERS, TEST_CONCURRENCY" envDefault:"1"`
	Deprecated []Deprecation `env:"-"`
}

func TestRenamesReadsTheOldTags(t *testing.T) {
	t.Parallel()
	require.Equal(t, []Rename{
		{Old: "TEST_DIR", New: "TEST_NEW_DIR"},
		{Old: "TEST_WAIT", New: "TEST_SVC_WAIT"},
		{Old: "TEST_WORKERS", New: "TEST_SVC_MAX_WORKERS"},
		{Old: "TEST_CONCURRENCY", New: "TEST_SVC_MAX_WORKERS"},
	}, Renames(reflect.TypeFor[renamed]()))
}

func TestParseOldNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		environ map[string]string
		want    renamed
		warned  []Deprecation
	}{
		{
			name:    "new names only: no warning",
			environ: map[string]string{"TEST_NEW_DIR": "/n", "TEST_SVC_WAIT": "3s", "TEST_SVC_MAX_WORKERS": "4"},
			want:    renamed{Inner: renamedInner{Dir: "/n"}, Wait: 3 * time.Second, Workers: 4},
		},
		{
			name:    "old names only: their values, a warning each",
			environ: map[string]string{"TEST_DIR": "/o", "TEST_WAIT": "5s", "TEST_WORKERS": "7"},
			want:    renamed{Inner: renamedInner{Dir: "/o"}, Wait: 5 * time.Second, Workers: 7},
			warned: []Deprecation{
				{Old: "TEST_DIR", New: "TEST_NEW_DIR"},
				{Old: "TEST_WAIT", New: "TEST_SVC_WAIT"},
				{Old: "TEST_WORKERS", New: "TEST_SVC_MAX_WORKERS"},
			},
		},
		{
			name:    "both set: the new name wins, the warning says so",
			environ: map[string]string{"TEST_WAIT": "5s", "TEST_SVC_WAIT": "9s"},
			want:    renamed{Inner: renamedInner{Dir: "./d"}, Wait: 9 * time.Second, Workers: 1},
			warned:  []Deprecation{{Old: "TEST_WAIT", New: "TEST_SVC_WAIT", Ignored: true}},
		},
		{
			name:    "a second former name works too",
			environ: map[string]string{"TEST_CONCURRENCY": "3"},
			want:    renamed{Inner: renamedInner{Dir: "./d"}, Wait: 2 * time.Second, Workers: 3},
			warned:  []Deprecation{{Old: "TEST_CONCURRENCY", New: "TEST_SVC_MAX_WORKERS"}},
		},
		{
			name:    "an old name set empty counts as unset",
			environ: map[string]string{"TEST_WAIT": ""},
			want:    renamed{Inner: renamedInner{Dir: "./d"}, Wait: 2 * time.Second, Workers: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c renamed
			warned, err := Parse(&c, tc.environ)
			require.NoError(t, err)
			require.Equal(t, tc.want, c)
			require.Equal(t, tc.warned, warned)
		})
	}
}

func TestParseOldNameErrorsNameTheNewVariable(t *testing.T) {
	t.Parallel()
	var c renamed
	_, err := Parse(&c, map[string]string{"TEST_WAIT": "soon"})
	require.ErrorContains(t, err, "TEST_SVC_WAIT: cannot parse")
}

func TestDeprecationMessageNamesTheNewVariable(t *testing.T) {
	t.Parallel()
	used := Deprecation{Old: "TEST_WAIT", New: "TEST_SVC_WAIT"}.Message()
	require.Contains(t, used, "TEST_WAIT is deprecated")
	require.Contains(t, used, "TEST_SVC_WAIT")
	require.Contains(t, used, "value is used")
	ignored := Deprecation{Old: "TEST_WAIT", New: "TEST_SVC_WAIT", Ignored: true}.Message()
	require.Contains(t, ignored, "TEST_SVC_WAIT is set too and wins")
}

func TestExplainNamesTheFormerName(t *testing.T) {
	t.Parallel()
	used := []Deprecation{{Old: "TEST_MAX", New: "TEST_SVC_MAX"}, {Old: "TEST_X", New: "TEST_SVC_X", Ignored: true}}
	require.NoError(t, Explain(nil, used))
	err := Explain(errors.New("TEST_SVC_MAX: must be positive, got 0"), used)
	require.EqualError(t, err, "TEST_SVC_MAX: must be positive, got 0\n(TEST_SVC_MAX was read from its former name TEST_MAX)")
	// A longer name that starts alike, or an ignored former name, gets no note.
	plain := errors.New("TEST_SVC_MAX_PER_TENANT: must be positive; TEST_SVC_X: bad")
	require.Equal(t, plain, Explain(plain, used))

	var c renamed
	_, err = Parse(&c, map[string]string{"TEST_WAIT": "soon"})
	require.ErrorContains(t, err, "TEST_SVC_WAIT was read from its former name TEST_WAIT")
}

// reused has a former name that another service reads now, with a
// meaning of its own (envNow).
type reused struct {
	Hint time.Duration `env:"TEST_SVC_HINT" envOld:"TEST_INTERVAL" envNow:"TEST_INTERVAL:the other service's period" envDefault:"2s"`
}

func TestParseFormerNameOfAnotherService(t *testing.T) {
	t.Parallel()
	require.Equal(t, []Rename{{Old: "TEST_INTERVAL", New: "TEST_SVC_HINT", Now: "the other service's period"}},
		Renames(reflect.TypeFor[reused]()))

	var c reused
	warned, err := Parse(&c, map[string]string{"TEST_INTERVAL": "5s"})
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.Hint, "still read while the new name is unset")
	require.Equal(t, []Deprecation{{Old: "TEST_INTERVAL", New: "TEST_SVC_HINT", Now: "the other service's period"}}, warned)
	msg := warned[0].Message()
	require.Contains(t, msg, "TEST_INTERVAL now sets only the other service's period")
	require.Contains(t, msg, "set TEST_SVC_HINT")

	// Both set: the former name is the other service's variable only, and
	// a deployment that sets it for that service is not told to remove it.
	c = reused{}
	warned, err = Parse(&c, map[string]string{"TEST_INTERVAL": "5s", "TEST_SVC_HINT": "7s"})
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, c.Hint)
	require.Empty(t, warned)
}
