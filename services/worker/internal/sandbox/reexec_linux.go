package sandbox

import (
	"os"
	"strings"
)

// The modes of the worker's binary this package adds: argv[0] of a
// process the worker starts through selfExe.
const (
	enterArg0  = "sluice-run-enter"
	wardenArg0 = "sluice-run-warden"
	probeArg0  = "sluice-run-probe"
)

// selfExe is the running binary, whatever its name or whether it was
// replaced on disk since it started.
const selfExe = "/proc/self/exe"

// init runs the launcher or the warden when this process is one of them,
// before main: the worker starts them from its own binary, so every binary
// that embeds a worker (the worker's, sluice dev, a Go service, a test
// binary) has them without a call in its main.
func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case enterArg0:
		os.Exit(enterMain(false))
	case probeArg0:
		os.Exit(enterMain(true))
	case wardenArg0:
		os.Exit(wardenMain())
	}
}

// helperEnv is the environment of the launcher and the warden: nothing of
// the worker's (its credentials among it) but the race detector's and the
// Go runtime's own debugging settings.
func helperEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GORACE=") || strings.HasPrefix(kv, "GOTRACEBACK=") {
			env = append(env, kv)
		}
	}
	return env
}
