package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// invocation is one run of one command: its environment, its global
// options and its client.
type invocation struct {
	env *Env
	cmd *command
	g   globals
	c   *Client
}

// errHelpShown means the command's help was asked for and printed.
var errHelpShown = errors.New("help shown")

// flagSet returns a flag set for the command with the global flags on it.
func (inv *invocation) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(inv.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	inv.g.register(fs)
	return fs
}

// parse parses args with fs, flags and arguments in any order ("--" ends
// the flags), and checks the number of arguments is within [minArgs,
// maxArgs] (maxArgs < 0: no limit). -h prints the help and returns
// errHelpShown.
func (inv *invocation) parse(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				inv.printHelp(inv.env.Stdout, fs)
				return nil, errHelpShown
			}
			return nil, &usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch {
	case len(positional) < minArgs:
		return nil, &usageError{"missing argument: usage: sluice " + inv.cmd.usage}
	case maxArgs >= 0 && len(positional) > maxArgs:
		return nil, &usageError{fmt.Sprintf("unexpected argument %q: usage: sluice %s", positional[maxArgs], inv.cmd.usage)}
	}
	return positional, nil
}

// printHelp writes the command's help and its flags.
func (inv *invocation) printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: sluice %s\n\n%s\n\nflags:\n", inv.cmd.usage, strings.TrimSpace(inv.cmd.help))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// client returns the client for the global options.
func (inv *invocation) client() (*Client, error) {
	if inv.c == nil {
		c, err := NewClient(inv.g.url, inv.g.token)
		if err != nil {
			return nil, &usageError{err.Error()}
		}
		inv.c = c
	}
	return inv.c, nil
}

// fail reports err on stderr (and, with --json, a server's error body on
// stdout) and returns its exit code.
func (inv *invocation) fail(err error) int {
	if errors.Is(err, errHelpShown) {
		return ExitOK
	}
	code := errorCode(err)
	var ae *APIError
	if inv.g.json && errors.As(err, &ae) {
		inv.writeJSON(ae.JSONBody())
	}
	msg := err.Error()
	if code == ExitInterrupted {
		msg = "interrupted"
	}
	fmt.Fprintf(inv.env.Stderr, "sluice %s: %s\n", inv.cmd.name, msg)
	if code == ExitUsage {
		fmt.Fprintf(inv.env.Stderr, "Run 'sluice %s -h' for help.\n", inv.cmd.name)
	}
	return code
}

// writeJSON writes one JSON document on stdout, ending with a newline.
func (inv *invocation) writeJSON(data []byte) {
	data = []byte(strings.TrimRight(string(data), "\n"))
	_, _ = inv.env.Stdout.Write(append(data, '\n'))
}

// checkID refuses what cannot be a job id before asking the server.
func checkID(id string) error {
	if !contracts.ValidJobID(id) {
		return &usageError{fmt.Sprintf("%q is not a job id (1-64 letters, digits, '-' or '_')", id)}
	}
	return nil
}

// newDisplay picks how to show a followed job: JSON lines for --json when
// asked, a live bar on a terminal, plain lines otherwise. With --json and
// jsonLines false, the bar goes to stderr when it is a terminal.
func (inv *invocation) newDisplay(jsonLines bool) display {
	e := inv.env
	if inv.g.json {
		if jsonLines {
			return &jsonDisplay{out: e.Stdout, errw: e.Stderr}
		}
		if ok, _ := e.Terminal(e.Stderr); ok {
			return newBarDisplay(e.Stderr, e.Stderr, inv.widthOf(e.Stderr), e.Now)
		}
		return nopDisplay{errw: e.Stderr}
	}
	if ok, _ := e.Terminal(e.Stdout); ok {
		return newBarDisplay(e.Stdout, e.Stderr, inv.widthOf(e.Stdout), e.Now)
	}
	return newLineDisplay(e.Stdout, e.Stderr, false)
}

// widthOf returns a function reading w's current width (it changes when
// the window is resized).
func (inv *invocation) widthOf(w io.Writer) func() int {
	return func() int {
		_, width := inv.env.Terminal(w)
		return width
	}
}
