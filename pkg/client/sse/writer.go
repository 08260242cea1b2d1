package sse

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrUnencodable means an event holds a character its field cannot carry:
// a line break in its id or type, a NUL in its id, or a carriage return in
// its data.
var ErrUnencodable = errors.New("sse: event cannot be encoded")

// Write writes ev to w as one event: its id (always, so an empty ID resets
// the reader's last id), its type (unless empty or "message"), and one
// data line per line of Data.
func Write(w io.Writer, ev Event) error {
	if strings.ContainsAny(ev.ID, "\r\n\x00") || strings.ContainsAny(ev.Type, "\r\n") || strings.ContainsRune(ev.Data, '\r') {
		return ErrUnencodable
	}
	var b strings.Builder
	b.WriteString("id: ")
	b.WriteString(ev.ID)
	b.WriteByte('\n')
	if ev.Type != "" && ev.Type != "message" {
		b.WriteString("event: ")
		b.WriteString(ev.Type)
		b.WriteByte('\n')
	}
	for _, line := range strings.Split(ev.Data, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	return nil
}

// WriteComment writes a comment line, such as a keep-alive ": ping".
func WriteComment(w io.Writer, text string) error {
	if strings.ContainsAny(text, "\r\n") {
		return ErrUnencodable
	}
	if _, err := io.WriteString(w, ": "+text+"\n"); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	return nil
}
