// Package cli is the sluice command line client of the HTTP API v1:
// submit, get, ls, watch, cancel and stats. It reads the server's address
// from SLUICE_URL and its token from SLUICE_TOKEN (or --url and --token),
// prints people-friendly output by default and the API's JSON with --json
// (only JSON on stdout; messages always go to stderr), and ends with an
// exit code scripts can rely on (see Exit*).
//
// Following a job (submit --wait, watch, cancel --wait) reads its event
// stream, reconnecting with Last-Event-ID when the stream drops, and polls
// the job instead when the server has no event stream.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"
)

// DefaultURL is the server address when neither SLUICE_URL nor --url
// gives one: where `sluice dev` listens.
const DefaultURL = "http://127.0.0.1:8080"

// Env is what a command runs with: its streams, environment and clock.
type Env struct {
	// Stdin is read by --payload -.
	Stdin io.Reader
	// Stdout takes the output proper: ids, views, tables, JSON.
	Stdout io.Writer
	// Stderr takes messages and errors.
	Stderr io.Writer
	// Getenv reads an environment variable.
	Getenv func(string) string
	// Terminal reports whether w is a terminal and, if so, its width.
	Terminal func(w io.Writer) (bool, int)
	// Now reads the clock.
	Now func() time.Time
}

// OSEnv is the process's own streams, environment and clock.
func OSEnv() *Env {
	return &Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Terminal: fileTerminal, Now: time.Now,
	}
}

// fileTerminal reports whether w is an *os.File on a terminal, and its
// width.
func fileTerminal(w io.Writer) (bool, int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil || width <= 0 {
		width = 80
	}
	return true, width
}

// Extra is a command the cli package does not implement itself but lists
// in its help (such as `sluice dev`).
type Extra struct {
	// Name is the command's name on the command line.
	Name string
	// Summary is its one-line description in the help.
	Summary string
	// Run runs the command with the arguments after its name.
	Run func(args []string) int
}

// Main runs the command line args (without the program name) with the
// process's streams and environment, stopping on SIGINT and SIGTERM, and
// returns the exit code.
func Main(args []string, extra ...Extra) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, OSEnv(), args, extra...)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	// usage is the synopsis after "sluice ".
	usage string
	// help explains the command, its output and its exit codes.
	help string
	run  func(ctx context.Context, inv *invocation, args []string) (int, error)
}

// commands are the subcommands, in the order the help lists them.
var commands []*command

func init() {
	commands = []*command{cmdSubmit, cmdGet, cmdLs, cmdWatch, cmdCancel, cmdStats}
}

// globals are the options every command takes.
type globals struct {
	url   string
	token string
	json  bool
}

// register adds the global flags to fs. Their current values are kept as
// defaults but never printed in the help (the token is a secret).
func (g *globals) register(fs *flag.FlagSet) {
	fs.Var((*quietString)(&g.url), "url", "server `URL` (default $SLUICE_URL, else "+DefaultURL+")")
	fs.Var((*quietString)(&g.token), "token", "API `token`, sent as \"Authorization: Bearer <token>\" (default $SLUICE_TOKEN; prefer the variable: a flag shows in the process list)")
	fs.BoolVar(&g.json, "json", g.json, "print the API's JSON on stdout (for scripts); messages stay on stderr")
}

// quietString is a string flag whose value the help never shows.
type quietString string

// String implements flag.Value; it is empty so no default is printed.
func (q *quietString) String() string { return "" }

// Set implements flag.Value.
func (q *quietString) Set(v string) error {
	*q = quietString(v)
	return nil
}

// Run runs the command line args in env and returns the exit code.
func Run(ctx context.Context, env *Env, args []string, extra ...Extra) int {
	g := globals{url: env.Getenv("SLUICE_URL"), token: env.Getenv("SLUICE_TOKEN")}
	if g.url == "" {
		g.url = DefaultURL
	}
	top := flag.NewFlagSet("sluice", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	top.Usage = func() {}
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(env.Stdout, extra)
			return ExitOK
		}
		fmt.Fprintf(env.Stderr, "sluice: %v\nRun 'sluice help' for usage.\n", err)
		return ExitUsage
	}
	args = top.Args()
	if len(args) == 0 {
		usage(env.Stderr, extra)
		return ExitUsage
	}
	name, rest := args[0], args[1:]
	if name == "help" {
		return help(env, rest, extra)
	}
	for _, x := range extra {
		if x.Name == name {
			return x.Run(rest)
		}
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(env.Stderr, "sluice: unknown command %q\nRun 'sluice help' for usage.\n", name)
		return ExitUsage
	}
	inv := &invocation{env: env, cmd: cmd, g: g}
	code, err := cmd.run(ctx, inv, rest)
	if err != nil {
		return inv.fail(err)
	}
	return code
}

// lookup finds a command by name.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// help is `sluice help [command]`.
func help(env *Env, args []string, extra []Extra) int {
	if len(args) == 0 {
		usage(env.Stdout, extra)
		return ExitOK
	}
	if cmd := lookup(args[0]); cmd != nil {
		inv := &invocation{env: env, cmd: cmd}
		inv.printHelp(env.Stdout, inv.flagSet())
		return ExitOK
	}
	for _, x := range extra {
		if x.Name == args[0] {
			return x.Run([]string{"-h"})
		}
	}
	fmt.Fprintf(env.Stderr, "sluice help: unknown command %q\n", args[0])
	return ExitUsage
}

// usage is the overall help.
func usage(w io.Writer, extra []Extra) {
	type entry struct{ name, summary string }
	var list []entry
	for _, c := range commands {
		list = append(list, entry{c.name, c.summary})
	}
	for _, x := range extra {
		list = append(list, entry{x.Name, x.Summary})
	}
	var b strings.Builder
	b.WriteString("usage: sluice [--url URL] [--token TOKEN] [--json] <command> [arguments] [flags]\n\ncommands:\n")
	for _, e := range list {
		fmt.Fprintf(&b, "  %-8s %s\n", e.name, e.summary)
	}
	b.WriteString(`  help     show this help, or a command's: sluice help <command>

The server is $SLUICE_URL (default ` + DefaultURL + `); $SLUICE_TOKEN is sent as a
bearer token. --url and --token override them, before or after the command.
--json prints the API's JSON on stdout; messages always go to stderr.

exit codes:
    0  the job succeeded, or the command did what it was asked
    1  the job failed, or talking to the server did
    2  the command line is wrong
    3  the job was cancelled
    4  the job was rejected at admission (429: a cap or a rate limit)
  130  interrupted while following a job (the job goes on)
`)
	io.WriteString(w, b.String())
}
