package eventid

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func testCodec(t testing.TB, seed byte) *Codec {
	t.Helper()
	return New([KeySize]byte(bytes.Repeat([]byte{seed}, KeySize)))
}

// TestIDs: an id reads back to its sequence for its tenant only, is
// opaque (no digits of the sequence, no order), and nothing else reads.
func TestIDs(t *testing.T) {
	t.Parallel()
	c := testCodec(t, 1)
	idRE := regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)
	var prev string
	for _, seq := range []uint64{0, 1, 2, 41, 1 << 40, 1<<64 - 1} {
		id := c.ID("acme", seq)
		require.Regexp(t, idRE, id)
		if seq >= 1000 {
			require.NotContains(t, id, strconv.FormatUint(seq, 10), "seq %d", seq)
		}
		got, ok := c.Seq("acme", id)
		require.True(t, ok, "seq %d", seq)
		require.Equal(t, seq, got)
		require.Equal(t, id, c.ID("acme", seq), "ids are stable")
		require.NotEqual(t, prev, id)
		prev = id

		_, ok = c.Seq("globex", id)
		require.False(t, ok, "another tenant cannot use acme's id")
		_, ok = testCodec(t, 2).Seq("acme", id)
		require.False(t, ok, "another key cannot read it")
		require.NotEqual(t, id, c.ID("globex", seq))
	}
	for _, bad := range []string{"", "0", "41", "999999", "-1", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAAAA", "!!!!!!!!!!!!!!!!!!!!!!"} {
		_, ok := c.Seq("acme", bad)
		require.False(t, ok, "%q", bad)
	}
}

// FuzzSeq: Seq reads any text without panicking, accepts only what ID
// made for the tenant, and ID then makes the same text again.
func FuzzSeq(f *testing.F) {
	c := testCodec(f, 3)
	for _, s := range []string{"", "1", "999999", c.ID("acme", 7), c.ID("globex", 7), "AAAAAAAAAAAAAAAAAAAAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		seq, ok := c.Seq("acme", id)
		if !ok {
			return
		}
		if again := c.ID("acme", seq); again != id {
			t.Fatalf("%q reads as %d, which is %q", id, seq, again)
		}
	})
}
