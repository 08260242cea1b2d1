package sse_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client/sse"
)

// readAll reads every event of a stream and the error that ended it.
func readAll(r *sse.Reader) ([]sse.Event, error) {
	var out []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []sse.Event
	}{
		{name: "empty stream", in: ""},
		{name: "one event", in: "id: 1\nevent: state\ndata: {\"a\":1}\n\n",
			want: []sse.Event{{ID: "1", Type: "state", Data: `{"a":1}`}}},
		{name: "default type is message", in: "data: x\n\n",
			want: []sse.Event{{Type: "message", Data: "x"}}},
		{name: "multi-line data joined with newlines", in: "data: a\ndata: b\ndata:\ndata: c\n\n",
			want: []sse.Event{{Type: "message", Data: "a\nb\n\nc"}}},
		{name: "only one leading space is removed", in: "data:  two\ndata:none\n\n",
			want: []sse.Event{{Type: "message", Data: " two\nnone"}}},
		{name: "comments and pings are skipped", in: ": ping\n\n: hello\ndata: x\n: mid\n\n: ping\n\n",
			want: []sse.Event{{Type: "message", Data: "x"}}},
		{name: "id persists across events", in: "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			want: []sse.Event{{ID: "7", Type: "message", Data: "a"}, {ID: "7", Type: "message", Data: "b"}, {ID: "", Type: "message", Data: "c"}}},
		{name: "id with NUL is ignored", in: "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			want: []sse.Event{{ID: "1", Type: "message", Data: "a"}, {ID: "1", Type: "message", Data: "b"}}},
		{name: "event without data is not dispatched and its type does not carry over", in: "event: state\n\ndata: x\n\n",
			want: []sse.Event{{Type: "message", Data: "x"}}},
		{name: "empty data line is still data", in: "event: e\ndata\n\n",
			want: []sse.Event{{Type: "e", Data: ""}}},
		{name: "CRLF line ends", in: "id: 3\r\nevent: progress\r\ndata: p\r\n\r\n",
			want: []sse.Event{{ID: "3", Type: "progress", Data: "p"}}},
		{name: "CR line ends", in: "id: 4\revent: s\rdata: a\rdata: b\r\r",
			want: []sse.Event{{ID: "4", Type: "s", Data: "a\nb"}}},
		{name: "mixed line ends", in: "data: a\r\ndata: b\rdata: c\n\r\n",
			want: []sse.Event{{Type: "message", Data: "a\nb\nc"}}},
		{name: "unknown fields are ignored", in: "foo: bar\ndata: x\nbaz\n\n",
			want: []sse.Event{{Type: "message", Data: "x"}}},
		{name: "colons in values are kept", in: "data: a: b: c\n\n",
			want: []sse.Event{{Type: "message", Data: "a: b: c"}}},
		{name: "byte order mark at the start is skipped", in: "\xEF\xBB\xBFdata: x\n\n",
			want: []sse.Event{{Type: "message", Data: "x"}}},
		{name: "a truncated byte order mark is data", in: "\xEF\xBBdata: x\n\n"},
		{name: "unfinished event at the end is dropped", in: "data: a\n\ndata: b\n",
			want: []sse.Event{{Type: "message", Data: "a"}}},
		{name: "unfinished line at the end is dropped", in: "data: a\n\ndata: b",
			want: []sse.Event{{Type: "message", Data: "a"}}},
		{name: "field name is case sensitive", in: "Data: a\ndata: b\n\n",
			want: []sse.Event{{Type: "message", Data: "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Byte by byte too: the reader must not depend on how the
			// stream is split into reads.
			for _, src := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readAll(sse.NewReader(src))
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestReaderRetry(t *testing.T) {
	t.Parallel()
	r := sse.NewReader(strings.NewReader("retry: 1500\ndata: a\n\nretry: 1x\nretry: -3\ndata: b\n\nretry: 99999999999999999999\ndata: c\n\n"))
	_, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, r.Retry())
	_, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, r.Retry(), "bad retry values are ignored")
	_, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, r.Retry(), "a huge retry is capped")
}

func TestReaderLastID(t *testing.T) {
	t.Parallel()
	r := sse.NewReader(strings.NewReader("id: 41\nevent: snapshot\ndata: {}\n\nid: 42\n\n"))
	ev, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, "41", ev.ID)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, "42", r.LastID(), "an id without data still moves the last id")
}

func TestReaderLimits(t *testing.T) {
	t.Parallel()
	t.Run("long line", func(t *testing.T) {
		t.Parallel()
		r := sse.NewReader(strings.NewReader("data: " + strings.Repeat("x", 100) + "\n\n"))
		r.MaxEventSize = 64
		_, err := r.Next()
		require.ErrorIs(t, err, sse.ErrTooLarge)
		_, err = r.Next()
		require.ErrorIs(t, err, sse.ErrTooLarge, "the error sticks")
	})
	t.Run("many short lines", func(t *testing.T) {
		t.Parallel()
		r := sse.NewReader(strings.NewReader(strings.Repeat("data: x\n", 100) + "\n"))
		r.MaxEventSize = 64
		_, err := r.Next()
		require.ErrorIs(t, err, sse.ErrTooLarge)
	})
	t.Run("the limit is per event", func(t *testing.T) {
		t.Parallel()
		r := sse.NewReader(strings.NewReader(strings.Repeat("data: 0123456789\n\n", 100)))
		r.MaxEventSize = 64
		got, err := readAll(r)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 100)
	})
	t.Run("endless comments do not count", func(t *testing.T) {
		t.Parallel()
		r := sse.NewReader(strings.NewReader(strings.Repeat(": ping\n\n", 100) + "data: x\n\n"))
		r.MaxEventSize = 64
		got, err := readAll(r)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 1)
	})
}

func TestReaderReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := sse.NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom)))
	got, err := readAll(r)
	require.ErrorIs(t, err, boom)
	require.Equal(t, []sse.Event{{Type: "message", Data: "a"}}, got)
}

func TestWriteRoundTrip(t *testing.T) {
	t.Parallel()
	events := []sse.Event{
		{ID: "1", Type: "snapshot", Data: `{"id":"x"}`},
		{ID: "", Type: "message", Data: "line one\nline two\n\n"},
		{ID: "3", Type: "progress", Data: ""},
		{ID: "4", Type: " spaced", Data: " leading space"},
	}
	var buf bytes.Buffer
	for _, ev := range events {
		require.NoError(t, sse.Write(&buf, ev))
		require.NoError(t, sse.WriteComment(&buf, "ping"))
	}
	got, err := readAll(sse.NewReader(&buf))
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, events, got)
}

func TestWriteRefusesUnencodable(t *testing.T) {
	t.Parallel()
	for _, ev := range []sse.Event{
		{ID: "a\nb", Data: "x"},
		{ID: "a\x00b", Data: "x"},
		{Type: "a\rb", Data: "x"},
		{Data: "a\rb"},
	} {
		require.ErrorIs(t, sse.Write(io.Discard, ev), sse.ErrUnencodable)
	}
	require.ErrorIs(t, sse.WriteComment(io.Discard, "a\nb"), sse.ErrUnencodable)
}
