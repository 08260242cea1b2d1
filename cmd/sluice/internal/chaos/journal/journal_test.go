package journal_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
)

func TestWriteReadDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := journal.Create(filepath.Join(dir, "w1"+journal.Ext))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			require.NoError(t, w.Write(journal.Entry{JobID: "j", Attempt: int64(i), WorkerID: "w1", Event: journal.EventStart, T: int64(i), PID: 1}))
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())

	// A second incarnation appends to the same file; a torn line is skipped.
	w, err = journal.Create(filepath.Join(dir, "w1"+journal.Ext))
	require.NoError(t, err)
	require.NoError(t, w.Write(journal.Entry{JobID: "j", Attempt: 1, WorkerID: "w1", Event: journal.EventEnd, T: 99, CtxErr: "lease lost", PID: 2}))
	require.NoError(t, w.Close())
	f, err := os.OpenFile(filepath.Join(dir, "w1"+journal.Ext), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"job_id":"j","attem`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.log"), []byte("not a journal\n"), 0o644))

	entries, bad, err := journal.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 51)
	require.Equal(t, 1, bad)
	last := entries[len(entries)-1]
	require.Equal(t, journal.Entry{JobID: "j", Attempt: 1, WorkerID: "w1", Event: journal.EventEnd, T: 99, CtxErr: "lease lost", PID: 2}, last)
}
