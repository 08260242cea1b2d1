// Package journal is the event log of the chaos harness's probe worker:
// one JSON line per handler event, appended to one file per worker. The
// store keeps only a job's latest attempt; the journal keeps every run of
// every attempt, so the harness can tell whether two of them ever ran at
// once.
package journal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Events a handler journals.
const (
	// EventStart is written when the handler starts, before its first step.
	EventStart = "start"
	// EventCtxDone is written when the handler's context ends (the worker
	// fenced the attempt, learned its lease was lost, a cancel request or
	// shutdown), with the context's cause.
	EventCtxDone = "ctx_done"
	// EventEnd is written just before the handler returns; CtxErr is set
	// when it stopped because its context ended.
	EventEnd = "end"
)

// Entry is one journal line.
type Entry struct {
	JobID    string `json:"job_id"`
	Attempt  int64  `json:"attempt"`
	WorkerID string `json:"worker_id"`
	Event    string `json:"event"`
	// T is the wall-clock time of the event in Unix nanoseconds.
	T int64 `json:"t"`
	// CtxErr is the cause the handler's context ended with, if it ended.
	CtxErr string `json:"ctx_err,omitempty"`
	// PID is the process that wrote the line: one per worker incarnation.
	PID int `json:"pid"`
	// Need is, on a start line, what the run takes of its worker: the
	// job's declaration with the worker's defaults filled in
	// (contracts.ResourceDefaults.Need), as the worker counts it.
	Need *contracts.Resources `json:"need,omitempty"`
	// Capacity is, on a start line, the worker's capacity
	// (SLUICE_WORKER_CPU, SLUICE_WORKER_MEMORY).
	Capacity *contracts.Resources `json:"capacity,omitempty"`
}

// Ext is the file name extension of journal files.
const Ext = ".journal"

// Writer appends entries to one journal file. It is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Create opens (or creates) the journal file at path for appending.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	return &Writer{f: f}, nil
}

// Write appends e as one line with a single write, so a process killed
// between two writes leaves whole lines behind (the page cache keeps what
// was written; no fsync is needed to survive kill -9).
func (w *Writer) Write(e Entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	data = append(data, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(data); err != nil {
		return fmt.Errorf("journal: write: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("journal: close: %w", err)
	}
	return nil
}

// ReadDir reads every *.journal file in dir. Lines that do not decode (at
// most a torn last line of a killed process) are skipped and counted.
func ReadDir(dir string) (entries []Entry, bad int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+Ext))
	if err != nil {
		return nil, 0, fmt.Errorf("journal: list %s: %w", dir, err)
	}
	for _, name := range files {
		es, b, err := readFile(name)
		if err != nil {
			return nil, 0, err
		}
		entries = append(entries, es...)
		bad += b
	}
	return entries, bad, nil
}

func readFile(name string) (entries []Entry, bad int, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: open %s: %w", name, err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e Entry
		if json.Unmarshal([]byte(line), &e) != nil || e.JobID == "" || e.Event == "" {
			bad++
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		return nil, 0, fmt.Errorf("journal: read %s: %w", name, err)
	}
	return entries, bad, nil
}
