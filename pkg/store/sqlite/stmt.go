package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxCachedStmts bounds a statement cache. Transition builds its UPDATE
// from the fields a change sets; the services use a few dozen shapes.
// UpdateEach's group statements add up to six sizes of each shape of
// result (changegroup.go).
const maxCachedStmts = 256

// stmtCache keeps prepared statements of one *sql.DB by query text, so that
// the hot paths do not parse their SQL on every call (with modernc.org/sqlite
// parsing costs as much as executing).
//
// get must not be called inside a transaction of that *sql.DB: preparing
// may need a connection, and the writer has only one.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}}
}

// get returns the prepared statement for query, preparing it on first use.
// It returns nil and no error when the cache is full: the caller then runs
// the query text.
func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[query]
	full := len(c.m) >= maxCachedStmts
	c.mu.Unlock()
	if ok || full {
		return st, nil
	}
	// Prepare without the lock: it may wait for a busy connection.
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.m[query]; ok {
		_ = st.Close()
		return prev, nil
	}
	c.m[query] = st
	return st, nil
}

// lookup returns the prepared statement for query, or nil when it is not
// prepared yet. Unlike get it never prepares, so it may be called inside
// a transaction.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// close closes every cached statement.
func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

// stmtIn is st bound to tx, or a statement prepared for tx alone when st
// is nil. The transaction closes it.
func stmtIn(ctx context.Context, tx *sql.Tx, st *sql.Stmt, query string) (*sql.Stmt, error) {
	if st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, query)
}

// writeStmts are the writer's fixed statements, prepared at Open.
type writeStmts struct {
	activeByKey   *sql.Stmt
	counterRow    *sql.Stmt
	flushCounters *sql.Stmt
	insertJob     *sql.Stmt
	// insertPlainOne inserts one plain new job (see rowShape.valuesQuery).
	insertPlainOne *sql.Stmt
	// insertBody inserts one new job's cold part.
	insertBody *sql.Stmt
	// plainRows, jobRowsInsert and bodyRows insert many new rows: plain
	// jobs, other jobs, bodies (see valuesrow.go).
	plainRows, jobRowsInsert, bodyRows valuesInsert
	getJob                             *sql.Stmt
	jobRows                            keyed
	leases                             keyed
	renew                              keyed
	promote                            keyed
	// Claim's statements.
	expireClaims   *sql.Stmt
	ready          *sql.Stmt
	keyHolders     *sql.Stmt
	workerRunning  *sql.Stmt
	workerJobs     *sql.Stmt
	claim          keyed
	advanceVirtual *sql.Stmt
	// Fan-out's statements.
	parentRow   *sql.Stmt
	writeParent *sql.Stmt
	release     *sql.Stmt
	startParent *sql.Stmt
}

// prepareWrites prepares the writer's fixed statements into its cache.
func prepareWrites(ctx context.Context, c *stmtCache) (writeStmts, error) {
	var (
		ws  writeStmts
		err error
	)
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&ws.activeByKey, activeByKeyQuery},
		{&ws.counterRow, counterRowQuery},
		{&ws.flushCounters, flushCountersQuery},
		{&ws.insertJob, insertJobQuery},
		{&ws.insertPlainOne, insertPlainOneQuery},
		{&ws.insertBody, insertBodyQuery},
		{&ws.getJob, getQuery},
		{&ws.jobRows.one, getRowQuery},
		{&ws.jobRows.many, getRowsQuery},
		{&ws.leases.one, leaseStateQuery},
		{&ws.leases.many, leaseStatesQuery},
		{&ws.renew.one, renewOneQuery},
		{&ws.renew.many, renewQuery},
		{&ws.promote.one, promoteOneQuery},
		{&ws.promote.many, promoteQuery},
		{&ws.expireClaims, expireClaimsQuery},
		{&ws.ready, readyQuery},
		{&ws.keyHolders, keyHoldersQuery},
		{&ws.workerRunning, workerRunningQuery},
		{&ws.workerJobs, workerJobsQuery},
		{&ws.claim.one, claimOneQuery},
		{&ws.claim.many, claimQuery},
		{&ws.advanceVirtual, advanceVirtualQuery},
		{&ws.parentRow, parentRowQuery},
		{&ws.writeParent, writeParentQuery},
		{&ws.release, releaseQuery},
		{&ws.startParent, startParentQuery},
	} {
		if *p.dst, err = c.get(ctx, p.query); err != nil {
			return writeStmts{}, err
		}
	}
	ws.plainRows, ws.jobRowsInsert, ws.bodyRows = plainRowsInsert(), jobRowsInsert(), bodyRowsInsert()
	for _, v := range []*valuesInsert{&ws.plainRows, &ws.jobRowsInsert, &ws.bodyRows} {
		if err := v.prepare(ctx, c); err != nil {
			return writeStmts{}, err
		}
	}
	return ws, nil
}
