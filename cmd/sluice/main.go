// Command sluice is the Sluice command line. `sluice dev` runs the whole
// system in one process on the embedded default (embedded NATS with
// JetStream, the embedded store, gateway, scheduler, two workers, reaper).
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit codes scripts can rely on.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "dev":
		return dev(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: sluice <command> [flags]

commands:
  dev    run the whole system in one process (embedded NATS and store)
  help   show this help

Configuration comes from SLUICE_* environment variables; see README.md.
`)
}
