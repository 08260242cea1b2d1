// Command report is the comparison step of `make bench-peers`:
//
//	report mark -results DIR -o MARK     before the peers run: count the result lines already there
//	report table -sluice FILE -results DIR -mark MARK [-note TEXT]
//
// table prints Sluice's figures (from the benchmarks' output in FILE), the
// peers' figures of this run (the result lines after MARK), the ratios
// the targets name and whether each is met.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/cmd/sluice/internal/peers"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: report mark|table [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	results := fs.String("results", "", "the peers' results directory ($PEERS_DIR/results of peers.sh)")
	markFile := fs.String("mark", "", "the mark file written before the peers ran")
	out := fs.String("o", "", "mark: the file to write")
	sluiceFile := fs.String("sluice", "", "table: the output of Sluice's benchmarks")
	note := fs.String("note", "", "table: a line to print first")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "mark":
		m, err := peers.MarkResults(*results)
		if err != nil {
			return err
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return os.WriteFile(*out, b, 0o644)
	case "table":
		f, err := os.Open(*sluiceFile)
		if err != nil {
			return fmt.Errorf("-sluice: %w", err)
		}
		defer f.Close()
		sluice, err := peers.ParseSluice(f)
		if err != nil {
			return err
		}
		mark := peers.Mark{}
		if b, err := os.ReadFile(*markFile); err == nil {
			if err := json.Unmarshal(b, &mark); err != nil {
				return fmt.Errorf("-mark %s: %w", *markFile, err)
			}
		}
		river, asynq, err := peers.ReadPeers(*results, mark)
		if err != nil {
			return err
		}
		return peers.Print(os.Stdout, *note, sluice, river, asynq, peers.Judge(peers.Targets, sluice, river, asynq))
	}
	return fmt.Errorf("unknown step %q: mark or table", args[0])
}
