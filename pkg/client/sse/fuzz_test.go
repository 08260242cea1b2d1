package sse_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sluicehq/sluice/pkg/client/sse"
)

// FuzzReader feeds arbitrary bytes to the reader: it must not panic, must
// respect its size limit, and every event it returns must survive a write
// and a second read unchanged.
func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		"",
		"id: 1\nevent: snapshot\ndata: {\"id\":\"a\"}\n\n",
		"data: a\ndata: b\n\n: ping\n\n",
		"id: 2\r\nevent: state\r\ndata: x\r\n\r\n",
		"data: a\rdata: b\r\r",
		"\xEF\xBB\xBFretry: 100\nid\x00x\ndata\n\n",
		"id: 3\nid: 4\x00\nevent\n\ndata:  y\n\n",
	} {
		f.Add([]byte(seed))
	}
	const limit = 256
	f.Fuzz(func(t *testing.T, in []byte) {
		r := sse.NewReader(bytes.NewReader(in))
		r.MaxEventSize = limit
		var events []sse.Event
		for {
			ev, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, sse.ErrTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if len(ev.Data) > limit || len(ev.ID) > limit || len(ev.Type) > limit {
				t.Fatalf("event beyond the limit: %d/%d/%d bytes", len(ev.ID), len(ev.Type), len(ev.Data))
			}
			if ev.Type == "" {
				t.Fatal("event without a type")
			}
			events = append(events, ev)
		}
		var buf bytes.Buffer
		for _, ev := range events {
			if err := sse.Write(&buf, ev); err != nil {
				t.Fatalf("write %q: %v", ev, err)
			}
		}
		again := sse.NewReader(&buf)
		for i, want := range events {
			got, err := again.Next()
			if err != nil {
				t.Fatalf("event %d: re-read: %v", i, err)
			}
			if got != want {
				t.Fatalf("event %d: wrote %q, read back %q", i, want, got)
			}
		}
		if _, err := again.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("re-read: trailing event or error %v", err)
		}
	})
}
