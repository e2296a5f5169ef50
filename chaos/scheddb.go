package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schedDB is the bank's database as the tasks of a deterministic run see
// it. Every statement a task sends is a step of the scheduler, and runs on a
// connection whose backend pid the scheduler knows. A statement that waits
// for a lock only another task can release is cancelled by the scheduler:
// inside a transaction it runs behind a savepoint, rolled back to; the task
// then waits, as a task, until one of the transactions it waited for has
// ended, and sends the statement again. Statements sent without a task (the
// simulated clock following the database) run as they come: only the task
// holding the token sends them.
type schedDB struct {
	pool *pgxpool.Pool
	s    *sched

	mu    sync.Mutex
	ready map[uint32]bool // sessions whose deadlock_timeout is set
}

func newSchedDB(pool *pgxpool.Pool, s *sched) *schedDB {
	return &schedDB{pool: pool, s: s, ready: map[uint32]bool{}}
}

// detDeadlockTimeout is PostgreSQL's deadlock_timeout in a deterministic
// run: its detector, which picks its victim by the clock, must never fire
// before the scheduler's (see sched.go).
const detDeadlockTimeout = "1h"

// prepare sets deadlock_timeout on a connection that did not start with it
// (a pool the caller opened: PoolFor's sets it as a session starts).
func (d *schedDB) prepare(ctx context.Context, c *pgxpool.Conn) error {
	pid := c.Conn().PgConn().PID()
	d.mu.Lock()
	fresh := !d.ready[pid]
	d.mu.Unlock()
	if !fresh {
		return nil
	}
	if d.pool.Config().ConnConfig.RuntimeParams["deadlock_timeout"] != detDeadlockTimeout {
		if _, err := c.Exec(context.WithoutCancel(ctx), "SET deadlock_timeout = '"+detDeadlockTimeout+"'"); err != nil {
			return fmt.Errorf("deterministic run: set deadlock_timeout: %w", err)
		}
	}
	d.mu.Lock()
	d.ready[pid] = true
	d.mu.Unlock()
	return nil
}

// acquire checks a connection out for t. A run that needs more connections
// than its pool has fails here, rather than waiting for a connection that a
// waiting task holds (it would wait forever).
func (d *schedDB) acquire(ctx context.Context, t *task) (*pgxpool.Conn, uint32, error) {
	if st := d.pool.Stat(); st.AcquiredConns() >= st.MaxConns() {
		return nil, 0, fmt.Errorf("deterministic run: every one of the pool's %d connections is held by a task; use a larger pool (chaos.PoolFor)", st.MaxConns())
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	pid := c.Conn().PgConn().PID()
	if err := d.prepare(ctx, c); err != nil {
		c.Release()
		return nil, 0, err
	}
	d.s.register(pid, t)
	return c, pid, nil
}

func (d *schedDB) release(c *pgxpool.Conn, pid uint32) {
	d.s.unregister(pid)
	c.Release()
}

// result is what a statement gave: a tag, or rows read to the end.
type result struct {
	tag  pgconn.CommandTag
	rows *bufferedRows
}

// send runs one statement for t on pid, as a step: it waits to be chosen,
// sends it (through run), and, each time the scheduler cancels it for a
// lock, undoes it (undo), waits for the lock's holders, and sends it again.
// locks says whether it takes row locks (canWait), and so may wait for one.
//
// lockIDs are the account rows a SELECT … FOR UPDATE locks, in order: when
// the scheduler's model of the rows open transactions hold says it would
// wait (predictWait), it is not sent, and t waits for the holder at once.
func (d *schedDB) send(ctx context.Context, t *task, pid uint32, label string, endsTx, locks, inPG bool,
	lockIDs []int64, run func() (result, error), undo func() error) (result, error) {
	d.s.park(t, label)
	for {
		if blockers := d.s.predictWait(t, pid, lockIDs); blockers != nil {
			if d.s.waitLock(t, blockers, statementName(label)) {
				return result{}, deadlockVictim()
			}
			continue
		}
		d.s.inflight(t, pid, locks, inPG)
		sent := time.Now()
		res, err := run()
		if schedDebug {
			fmt.Fprintf(os.Stderr, "dbg %d %s | %s | %s err=%v | %dµs\n", d.s.now(), t.name, label, res.tag, err, time.Since(sent).Microseconds())
		}
		blockers, cancelled := d.s.returned(t, pid, err, endsTx)
		if !cancelled {
			return res, err
		}
		if undo != nil {
			if uerr := undo(); uerr != nil {
				return result{}, fmt.Errorf("deterministic run: undo a statement that waited for a lock: %w", uerr)
			}
		}
		if d.s.waitLock(t, blockers, statementName(label)) {
			return result{}, deadlockVictim()
		}
	}
}

// deadlockVictim is the error of a statement the scheduler made a
// deadlock's victim, as PostgreSQL reports one.
func deadlockVictim() error {
	return &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected", Detail: ErrDeadlockVictim.Error()}
}

// Exec implements bank.Querier.
func (d *schedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t := taskFrom(ctx)
	if t == nil {
		return d.pool.Exec(ctx, sql, args...)
	}
	label := stepName(t, sql)
	d.s.park(t, label)
	c, pid, err := d.acquire(ctx, t)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer d.release(c, pid)
	res, err := d.sendNow(ctx, t, pid, label, canWait(sql), func() (result, error) {
		tag, err := c.Exec(ctx, sql, args...)
		return result{tag: tag}, err
	})
	return res.tag, err
}

// sendNow is send for a task that has just parked at label and acquired
// its connection: an autocommit statement, which a cancel undoes whole;
// locks says whether it takes row locks (canWait).
func (d *schedDB) sendNow(ctx context.Context, t *task, pid uint32, label string, locks bool, run func() (result, error)) (result, error) {
	for {
		d.s.inflight(t, pid, locks, false)
		sent := time.Now()
		res, err := run()
		if schedDebug {
			fmt.Fprintf(os.Stderr, "dbg %d %s | %s | %s err=%v | %dµs\n", d.s.now(), t.name, label, res.tag, err, time.Since(sent).Microseconds())
		}
		blockers, cancelled := d.s.returned(t, pid, err, false)
		if !cancelled {
			return res, err
		}
		if d.s.waitLock(t, blockers, statementName(label)) {
			return result{}, deadlockVictim()
		}
	}
}

// Query implements bank.Querier. The rows are read to the end before it
// returns, so that a cancel is seen here, not halfway through the caller's
// loop.
func (d *schedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t := taskFrom(ctx)
	if t == nil {
		return d.pool.Query(ctx, sql, args...)
	}
	label := stepName(t, sql)
	d.s.park(t, label)
	c, pid, err := d.acquire(ctx, t)
	if err != nil {
		return nil, err
	}
	defer d.release(c, pid)
	res, err := d.sendNow(ctx, t, pid, label, canWait(sql), func() (result, error) {
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			return result{}, err
		}
		b, err := buffer(rows)
		return result{rows: b}, err
	})
	if err != nil {
		return nil, err
	}
	return res.rows, nil
}

// QueryRow implements bank.Querier.
func (d *schedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := d.Query(ctx, sql, args...)
	return &schedRow{rows: rows, err: err}
}

// Begin implements bank.DB.
func (d *schedDB) Begin(ctx context.Context) (pgx.Tx, error) {
	return d.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx implements bank.DB.
func (d *schedDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	t := taskFrom(ctx)
	if t == nil {
		return d.pool.BeginTx(ctx, opts)
	}
	label := stepName(t, "BEGIN")
	d.s.park(t, label)
	c, pid, err := d.acquire(ctx, t)
	if err != nil {
		return nil, err
	}
	var tx pgx.Tx
	_, err = d.sendNow(ctx, t, pid, label, false, func() (result, error) {
		var err error
		tx, err = c.BeginTx(ctx, opts)
		return result{}, err
	})
	if err != nil {
		d.release(c, pid)
		return nil, err
	}
	return &schedTx{d: d, c: c, tx: tx, pid: pid, owner: t}, nil
}

// schedTx is a transaction on a connection a task checked out: each of its
// statements is a step, and COMMIT or ROLLBACK gives the connection back.
type schedTx struct {
	d      *schedDB
	c      *pgxpool.Conn
	tx     pgx.Tx
	pid    uint32
	owner  *task
	closed bool
}

func (x *schedTx) task(ctx context.Context) *task {
	if t := taskFrom(ctx); t != nil {
		return t
	}
	return x.owner
}

// Begin implements pgx.Tx. Nested transactions are not part of anything a
// chaos run sends.
func (x *schedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	return nil, errors.New("deterministic run: nested transactions are not scheduled")
}

// Commit implements pgx.Tx.
func (x *schedTx) Commit(ctx context.Context) error { return x.end(ctx, "COMMIT", x.tx.Commit) }

// Rollback implements pgx.Tx.
func (x *schedTx) Rollback(ctx context.Context) error { return x.end(ctx, "ROLLBACK", x.tx.Rollback) }

func (x *schedTx) end(ctx context.Context, what string, f func(context.Context) error) error {
	if x.closed {
		return pgx.ErrTxClosed
	}
	t := x.task(ctx)
	_, err := x.d.send(ctx, t, x.pid, stepName(t, what), true, false, false, nil, func() (result, error) {
		return result{}, f(ctx)
	}, nil)
	x.closed = true
	x.d.release(x.c, x.pid)
	return err
}

// savepoint is where a statement that may wait for a lock starts, so that
// the scheduler's cancel undoes that statement only.
const savepoint = "bank_sim_step"

// mayWait reports whether sql can wait for a row lock: it locks rows or
// writes them (a plain SELECT never waits for one).
func mayWait(sql string) bool {
	q := strings.ToUpper(strings.TrimSpace(sql))
	if strings.Contains(q, ";") {
		return false // several statements (the bank emptied before a run): no savepoint can share their round trip
	}
	if strings.HasPrefix(q, "WITH") {
		// A data-modifying CTE (the dispatcher's claim without SKIP
		// LOCKED) waits for the rows it writes.
		return strings.Contains(q, "FOR UPDATE") || strings.Contains(q, "UPDATE ") ||
			strings.Contains(q, "INSERT INTO") || strings.Contains(q, "DELETE FROM")
	}
	return strings.Contains(q, "FOR UPDATE") || strings.HasPrefix(q, "UPDATE") ||
		strings.HasPrefix(q, "INSERT") || strings.HasPrefix(q, "DELETE")
}

// canWait reports whether an autocommit statement can wait for a lock: one
// that may (mayWait), or several statements in one string, which mayWait
// does not look into (the bank emptied before a run).
func canWait(sql string) bool {
	return mayWait(sql) || strings.Contains(sql, ";")
}

// waitsInPG reports whether sql, when it waits for a lock, is left to wait
// inside PostgreSQL instead of being cancelled and sent again: a statement
// whose first part reads the rows its later part writes (WITH c AS (SELECT
// …) UPDATE … FROM c). Waiting, it goes on with the rows it read before the
// lock was released, as in production; sent again, it would read them
// afresh, and hide that race (the dispatcher's claim without SKIP LOCKED).
// The scheduler lets one statement at a time wait so for a transaction,
// so that its end releases only one.
func waitsInPG(sql string) bool {
	q := strings.ToUpper(strings.Join(strings.Fields(sql), " "))
	if !strings.HasPrefix(q, "WITH ") {
		return false
	}
	open := strings.Index(q, " AS (")
	return open > 0 && strings.HasPrefix(strings.TrimSpace(q[open+len(" AS ("):]), "SELECT ") &&
		(strings.Contains(q, "UPDATE ") || strings.Contains(q, "DELETE FROM"))
}

// stmt runs one statement of the transaction: behind a savepoint, sent in
// the same round trip, when it may wait for a lock.
func (x *schedTx) stmt(ctx context.Context, sql string, args []any, rows bool) (result, error) {
	if x.closed {
		return result{}, pgx.ErrTxClosed
	}
	t := x.task(ctx)
	label := stepName(t, sql)
	res, err := x.send(ctx, t, label, sql, args, rows)
	if err == nil {
		x.d.s.noteRowLocks(x.pid, sql, args, res)
	}
	return res, err
}

func (x *schedTx) send(ctx context.Context, t *task, label, sql string, args []any, rows bool) (result, error) {
	if !mayWait(sql) {
		return x.d.send(ctx, t, x.pid, label, false, canWait(sql), false, nil, func() (result, error) {
			if rows {
				r, err := x.tx.Query(ctx, sql, args...)
				if err != nil {
					return result{}, err
				}
				b, err := buffer(r)
				return result{rows: b}, err
			}
			tag, err := x.tx.Exec(ctx, sql, args...)
			return result{tag: tag}, err
		}, nil)
	}
	lockIDs, _ := rowLocksFor(sql, args)
	return x.d.send(ctx, t, x.pid, label, false, true, waitsInPG(sql), lockIDs, func() (result, error) {
		b := &pgx.Batch{}
		b.Queue("SAVEPOINT " + savepoint)
		b.Queue(sql, args...)
		br := x.tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return result{}, err
		}
		var res result
		var err error
		if rows {
			var r pgx.Rows
			if r, err = br.Query(); err == nil {
				res.rows, err = buffer(r)
			}
		} else {
			res.tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return res, err
	}, func() error {
		_, err := x.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+savepoint)
		return err
	})
}

// Exec implements pgx.Tx.
func (x *schedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	res, err := x.stmt(ctx, sql, args, false)
	if q := strings.Fields(sql); err == nil && len(q) >= 3 && strings.EqualFold(q[0], "SET") && (q[1] == "lock_timeout" || q[2] == "lock_timeout") {
		// Its statements end by themselves now: the scheduler waits for
		// them instead of cancelling them.
		x.d.s.setTimed(x.pid)
	}
	return res.tag, err
}

// Query implements pgx.Tx.
func (x *schedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	res, err := x.stmt(ctx, sql, args, true)
	if err != nil {
		return nil, err
	}
	return res.rows, nil
}

// QueryRow implements pgx.Tx.
func (x *schedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := x.Query(ctx, sql, args...)
	return &schedRow{rows: rows, err: err}
}

// CopyFrom implements pgx.Tx; not scheduled (chaos sends none).
func (x *schedTx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	return x.tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

// SendBatch implements pgx.Tx; not scheduled (chaos sends none).
func (x *schedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return x.tx.SendBatch(ctx, b)
}

// LargeObjects implements pgx.Tx.
func (x *schedTx) LargeObjects() pgx.LargeObjects { return x.tx.LargeObjects() }

// Prepare implements pgx.Tx.
func (x *schedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return x.tx.Prepare(ctx, name, sql)
}

// Conn implements pgx.Tx.
func (x *schedTx) Conn() *pgx.Conn { return x.tx.Conn() }

// bufferedRows are a statement's rows, read to the end: scanned as pgx
// scans its own, with the connection's type map.
type bufferedRows struct {
	fields []pgconn.FieldDescription
	raw    [][][]byte
	values [][]any
	tag    pgconn.CommandTag
	m      *pgtype.Map
	conn   *pgx.Conn
	i      int
}

func buffer(rows pgx.Rows) (*bufferedRows, error) {
	defer rows.Close()
	b := &bufferedRows{fields: rows.FieldDescriptions(), m: rows.TypeMap(), conn: rows.Conn(), i: -1}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		raw := rows.RawValues()
		cp := make([][]byte, len(raw))
		for k, r := range raw {
			if r != nil {
				cp[k] = append([]byte{}, r...)
			}
		}
		b.raw, b.values = append(b.raw, cp), append(b.values, vals)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	b.tag = rows.CommandTag()
	if b.m == nil {
		b.m = pgtype.NewMap()
	}
	return b, nil
}

func (b *bufferedRows) Close()                                       {}
func (b *bufferedRows) Err() error                                   { return nil }
func (b *bufferedRows) CommandTag() pgconn.CommandTag                { return b.tag }
func (b *bufferedRows) FieldDescriptions() []pgconn.FieldDescription { return b.fields }
func (b *bufferedRows) Conn() *pgx.Conn                              { return b.conn }
func (b *bufferedRows) TypeMap() *pgtype.Map                         { return b.m }

func (b *bufferedRows) Next() bool {
	if b.i+1 >= len(b.raw) {
		b.i = len(b.raw)
		return false
	}
	b.i++
	return true
}

func (b *bufferedRows) Scan(dest ...any) error {
	if b.i < 0 || b.i >= len(b.raw) {
		return errors.New("no row to scan")
	}
	row := b.raw[b.i]
	if len(dest) != len(row) {
		return fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(row), len(dest))
	}
	for k, d := range dest {
		if d == nil {
			continue
		}
		if err := b.m.Scan(b.fields[k].DataTypeOID, b.fields[k].Format, row[k], d); err != nil {
			return pgx.ScanArgError{ColumnIndex: k, FieldName: b.fields[k].Name, Err: err}
		}
	}
	return nil
}

func (b *bufferedRows) Values() ([]any, error) {
	if b.i < 0 || b.i >= len(b.values) {
		return nil, errors.New("no row")
	}
	return b.values[b.i], nil
}

func (b *bufferedRows) RawValues() [][]byte {
	if b.i < 0 || b.i >= len(b.raw) {
		return nil
	}
	return b.raw[b.i]
}

// schedRow is QueryRow's row.
type schedRow struct {
	rows pgx.Rows
	err  error
}

func (r *schedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if !r.rows.Next() {
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// stepName names the step of sending sql: what the task does, and the
// statement in the lesson's words.
func stepName(t *task, sql string) string {
	return t.doing + ": " + statementName(sql)
}

// statementName is the name of sql in statements, or its first words; for
// a step's name, the part after what the task does.
func statementName(sql string) string {
	q := strings.Join(strings.Fields(sql), " ")
	if i := strings.LastIndex(q, ": "); i >= 0 && !strings.ContainsAny(q[:i], "()$") {
		q = q[i+2:] // a step's name
	}
	for _, s := range statements {
		if strings.HasPrefix(q, s.prefix) {
			return s.name
		}
	}
	if len(q) > 48 {
		q = q[:48] + "…"
	}
	return q
}

// statements name the statements a chaos run sends, by what they start with.
var statements = []struct{ prefix, name string }{
	{"BEGIN", "BEGIN"},
	{"COMMIT", "COMMIT"},
	{"ROLLBACK", "ROLLBACK"},
	{"INSERT INTO idempotency_keys", "claim the key"},
	{"SELECT request_hash", "read the key"},
	{"UPDATE idempotency_keys SET lock_id", "take the key over"},
	{"UPDATE idempotency_keys", "store the answer"},
	{"DELETE FROM idempotency_keys USING", "clean up old keys"},
	{"DELETE FROM idempotency_keys WHERE user_id", "release the key"},
	{"DELETE FROM idempotency_keys", "empty the bank"},
	{"SELECT 1 FROM idempotency_keys", "lock the key row"},
	{"SELECT balance_kobo FROM accounts WHERE id", "read the balance"},
	{"SELECT balance_kobo FROM accounts ORDER BY id", "read every balance"},
	{"SELECT id, owner_id, status, balance_kobo FROM accounts WHERE id IN ($1::bigint, $2::bigint) ORDER BY id FOR UPDATE", "lock both accounts"},
	{"SELECT id, owner_id, status, balance_kobo FROM accounts WHERE id IN", "read both accounts"},
	{"SELECT id, owner_id, status, balance_kobo FROM accounts WHERE id = $1::bigint FOR UPDATE", "lock the sender"},
	{"SELECT id, owner_id, status, balance_kobo FROM accounts WHERE id", "read the recipient"},
	{"SELECT 1 FROM accounts", "lock the sender's row"},
	{"UPDATE accounts SET balance_kobo = balance_kobo - ", "debit"},
	{"UPDATE accounts SET balance_kobo = balance_kobo + ", "credit"},
	{"UPDATE accounts SET balance_kobo = $1", "write the balance back"},
	{"UPDATE accounts SET status = 'frozen'", "freeze the sender"},
	{"UPDATE accounts SET status = 'active'", "unfreeze the sender"},
	{"INSERT INTO transfers", "record the transfer"},
	{"SET LOCAL lock_timeout", "set lock_timeout"},
	{"SET LOCAL deadlock_timeout", "set deadlock_timeout"},
	{"SELECT pg_backend_pid()", "read its backend's pid"},
	{"SELECT bank_now()", "read the database's clock"},
	{"UPDATE sim_clock", "move the database's clock"},
	{"SELECT user_id::text || '/' || key, coalesce(lock_id", "read the keys in progress"},
	{"SELECT user_id::text || '/' || key FROM idempotency_keys WHERE status", "read the keys"},
	{"SELECT id, owner_id, holder, status, balance_kobo FROM accounts", "read the ledger"},
	{"SELECT id, from_account", "read the transfers"},
	{"INSERT INTO accounts", "open an account"},
	// The side effects': the outbox, the dispatchers, the consumer.
	{"INSERT INTO outbox (", "add to the outbox"},
	{"WITH candidates AS", "claim outbox rows"},
	{"WITH renewed AS", "renew its claim"},
	{"WITH marked AS", "mark the row done"},
	{"UPDATE outbox SET claim_token = NULL", "give the row back"},
	{"UPDATE outbox_attempts", "record the attempt"},
	{"SELECT max(claimed_until)", "read its lease"},
	{"SELECT coalesce(claim_token", "look for a takeover"},
	{"INSERT INTO processed_events", "mark the event processed"},
	{"SELECT holder FROM accounts", "read a name"},
	{"INSERT INTO notifications", "write the notification"},
}

var schedDebug = os.Getenv("BANKSIM_SCHED_DEBUG") != ""
