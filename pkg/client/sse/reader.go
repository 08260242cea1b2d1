// Package sse reads and writes Server-Sent Events (the text/event-stream
// format of the HTML Living Standard): "field: value" lines, events ended by
// a blank line, comments starting with ':'. The reader bounds how much it
// buffers, since it decodes whatever a server sends.
package sse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxEventSize bounds one event (its fields and data lines together)
// when Reader.MaxEventSize is zero.
const DefaultMaxEventSize = 8 << 20

// ErrTooLarge means an event, or a single line, was larger than the
// reader's limit; the stream cannot be read further.
var ErrTooLarge = errors.New("sse: event larger than the limit")

// Event is one dispatched event.
type Event struct {
	// ID is the stream's last event id when the event was dispatched: the
	// value of the latest "id" field, which persists across events.
	ID string
	// Type is the "event" field, "message" when the event named none.
	Type string
	// Data is the event's data lines joined with "\n".
	Data string
}

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	// MaxEventSize bounds the bytes of one event, lines and field names
	// included (DefaultMaxEventSize when zero).
	MaxEventSize int

	r       *bufio.Reader
	lastID  string
	retry   time.Duration
	afterCR bool // the previous line ended with '\r': skip one '\n'
	started bool // the byte order mark is only skipped at the start
	line    []byte
	err     error
}

// NewReader returns a reader of the stream r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReader(r)}
}

// LastID is the stream's last event id: what a client sends as
// Last-Event-ID when it reconnects.
func (r *Reader) LastID() string { return r.lastID }

// Retry is the reconnection delay the server asked for in a "retry" field,
// or zero.
func (r *Reader) Retry() time.Duration { return r.retry }

// Next returns the next event. Comments, fields without data and unknown
// fields are consumed without returning. At the end of the stream it
// returns io.EOF; an event that was not ended by a blank line is dropped,
// as the standard says. After an error, every later call returns it again.
func (r *Reader) Next() (Event, error) {
	if r.err != nil {
		return Event{}, r.err
	}
	ev, err := r.next()
	if err != nil {
		r.err = err
	}
	return ev, err
}

func (r *Reader) next() (Event, error) {
	limit := r.MaxEventSize
	if limit <= 0 {
		limit = DefaultMaxEventSize
	}
	var (
		data    strings.Builder
		hasData bool
		typ     string
		size    int
	)
	for {
		line, err := r.readLine(limit - size)
		if err != nil {
			return Event{}, err
		}
		size += len(line) + 1
		if len(line) == 0 {
			if !hasData {
				typ = "" // nothing to dispatch; the type does not carry over
				size = 0
				continue
			}
			if typ == "" {
				typ = "message"
			}
			return Event{ID: r.lastID, Type: typ, Data: data.String()}, nil
		}
		if line[0] == ':' {
			continue // a comment, such as a keep-alive ping
		}
		name, value := splitField(line)
		switch name {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			typ = value
		case "id":
			if !strings.ContainsRune(value, 0) {
				r.lastID = value
			}
		case "retry":
			if ms, ok := parseRetry(value); ok {
				r.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// splitField splits a line into its field name and value; one space after
// the colon is not part of the value. A line without a colon is a field
// with an empty value.
func splitField(line []byte) (name, value string) {
	s := string(line)
	name, value, found := strings.Cut(s, ":")
	if !found {
		return s, ""
	}
	return name, strings.TrimPrefix(value, " ")
}

// maxRetryMS bounds a "retry" field so the duration cannot overflow.
const maxRetryMS = int64(24 * time.Hour / time.Millisecond)

// parseRetry reads a "retry" value: ASCII digits only.
func parseRetry(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms > maxRetryMS {
		return maxRetryMS, true
	}
	return ms, true
}

// readLine returns the next line without its end ("\r\n", "\n" or "\r").
// The returned slice is valid until the next call. A line longer than
// limit is ErrTooLarge; the end of the stream in the middle of a line is
// io.EOF (the partial line is dropped, as is any unfinished event).
func (r *Reader) readLine(limit int) ([]byte, error) {
	r.line = r.line[:0]
	for {
		b, err := r.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("sse: read: %w", err)
		}
		if !r.started {
			r.started = true
			if b == 0xEF && r.skipBOM() {
				continue
			}
		}
		if r.afterCR {
			r.afterCR = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return r.line, nil
		case '\r':
			r.afterCR = true
			return r.line, nil
		}
		if len(r.line) >= limit {
			return nil, ErrTooLarge
		}
		r.line = append(r.line, b)
	}
}

// skipBOM consumes the rest of a UTF-8 byte order mark after its first
// byte (0xEF) and reports whether there was one.
func (r *Reader) skipBOM() bool {
	next, err := r.r.Peek(2)
	if err == nil && next[0] == 0xBB && next[1] == 0xBF {
		_, _ = r.r.Discard(2)
		return true
	}
	return false
}
