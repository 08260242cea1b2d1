// Command gen writes docs/configuration.md from the services' Config types
// (make docs-config). It takes the file to write; by default Path under the
// working directory, which make runs from the repository's root.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/cmd/sluice/internal/configdoc"
)

func main() {
	out := flag.String("o", configdoc.Path, "the file to write")
	flag.Parse()
	if err := os.WriteFile(*out, configdoc.Render(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
