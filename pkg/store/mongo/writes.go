package mongo

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/tally"
)

// writeCommands are the commands that write (bulk writes are sent as these).
var writeCommands = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true}

// writeMonitor counts, from the client's command events, each write
// command that succeeded under the operation its context carries
// (store.WithWriteOp), and the documents it wrote as the server's reply
// reports them: job rows when its collection holds jobs (tally.JobTable),
// side rows otherwise.
type writeMonitor struct {
	tally *tally.Tally
	// inFlight maps the request id of each write command sent to its
	// collection, until its reply (or failure) comes.
	inFlight sync.Map
}

func newWriteMonitor(t *tally.Tally) *writeMonitor { return &writeMonitor{tally: t} }

// monitor is the client's command monitor.
func (m *writeMonitor) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: m.started, Succeeded: m.succeeded, Failed: m.failed}
}

func (m *writeMonitor) started(_ context.Context, e *event.CommandStartedEvent) {
	if !writeCommands[e.CommandName] {
		return
	}
	coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
	m.inFlight.Store(e.RequestID, coll)
}

func (m *writeMonitor) succeeded(ctx context.Context, e *event.CommandSucceededEvent) {
	if !writeCommands[e.CommandName] {
		return
	}
	coll, _ := m.inFlight.LoadAndDelete(e.RequestID)
	op := store.WriteOpOf(ctx)
	m.tally.Wrote(op)
	m.tally.Committed()
	n := docsWritten(e.CommandName, e.Reply)
	if name, _ := coll.(string); tally.JobTable(name) {
		m.tally.WroteRows(op, n)
		return
	}
	m.tally.WroteSide(n)
}

func (m *writeMonitor) failed(_ context.Context, e *event.CommandFailedEvent) {
	if writeCommands[e.CommandName] {
		m.inFlight.Delete(e.RequestID)
	}
}

// docsWritten is how many documents a write command's reply says it
// wrote: inserted (insert's n), modified or upserted (update's nModified
// and upserted; a document matched but left as it was is not written),
// deleted (delete's n), or the one findAndModify changed (its
// lastErrorObject's n).
func docsWritten(command string, reply bson.Raw) uint64 {
	switch command {
	case "update":
		n := replyCount(reply.Lookup("nModified"))
		if up, ok := reply.Lookup("upserted").ArrayOK(); ok {
			if vals, err := up.Values(); err == nil {
				n += uint64(len(vals))
			}
		}
		return n
	case "findAndModify":
		if leo, ok := reply.Lookup("lastErrorObject").DocumentOK(); ok {
			return replyCount(leo.Lookup("n"))
		}
		return 0
	}
	return replyCount(reply.Lookup("n"))
}

// replyCount reads a reply's count, whatever its numeric type (0 when absent).
func replyCount(v bson.RawValue) uint64 {
	if n, ok := v.AsInt64OK(); ok && n > 0 {
		return uint64(n)
	}
	return 0
}
