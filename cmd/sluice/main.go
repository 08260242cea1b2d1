// Command sluice is the Sluice command line: a client of the HTTP API
// (submit, get, ls, watch, cancel, stats; see internal/cli), and `sluice
// dev`, which runs the whole system in one process on the embedded default
// (embedded NATS with JetStream, the embedded store, gateway, scheduler,
// two workers, reaper).
package main

import (
	"os"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
)

// Exit codes scripts can rely on.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	devCmd := cli.Extra{
		Name:    "dev",
		Summary: "run the whole system in one process (embedded NATS and store)",
		Run:     func(args []string) int { return dev(args, os.Stdout, os.Stderr) },
	}
	os.Exit(cli.Main(os.Args[1:], devCmd))
}
