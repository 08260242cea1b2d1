package cli

import (
	"bytes"
	"io"
	"text/tabwriter"
)

// table aligns tab-separated cells into columns, like tabwriter, without
// the trailing spaces an empty last cell would leave.
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

// newTable returns a table writing to out on flush.
func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// Write implements io.Writer: cells end with '\t', rows with '\n'.
func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

// flush writes the aligned rows.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	lines := bytes.SplitAfter(t.buf.Bytes(), []byte("\n"))
	var out bytes.Buffer
	for _, line := range lines {
		nl := bytes.HasSuffix(line, []byte("\n"))
		line = bytes.TrimRight(line, " \n")
		out.Write(line)
		if nl {
			out.WriteByte('\n')
		}
	}
	t.buf.Reset()
	_, err := t.out.Write(out.Bytes())
	return err
}
