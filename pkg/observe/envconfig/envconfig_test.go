package envconfig

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type inner struct {
	Dir string `env:"TEST_DIR" envDefault:"./d"`
}

type config struct {
	Inner   inner
	Wait    time.Duration `env:"TEST_WAIT" envDefault:"2s"`
	Workers int           `env:"TEST_WORKERS" envDefault:"1"`
}

func TestParseDefaultsAndValues(t *testing.T) {
	t.Parallel()
	var c config
	_, err := Parse(&c, map[string]string{"TEST_WORKERS": "4"})
	require.NoError(t, err)
	require.Equal(t, config{Inner: inner{Dir: "./d"}, Wait: 2 * time.Second, Workers: 4}, c)
}

func TestParseErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	var c config
	_, err := Parse(&c, map[string]string{"TEST_WAIT": "soon", "TEST_WORKERS": "many"})
	require.ErrorContains(t, err, "TEST_WAIT: cannot parse")
	require.ErrorContains(t, err, "TEST_WORKERS: cannot parse")
	require.NotContains(t, err.Error(), "field \"Wait\"")
}
