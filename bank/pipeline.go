package bank

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pipeline is one transaction on one connection whose statements are not
// sent one at a time: they are queued, and sent together, in one round trip,
// only when the caller needs an answer (Flush) or commits. A transfer's
// account rows stay locked from the round trip that locks them to the one
// that commits, so every round trip saved in between is time that other
// transfers of the same accounts no longer wait.
//
// The first round trip carries BEGIN as well; Commit queues COMMIT behind
// the statements still waiting, so a transaction whose last statements need
// no answer ends in the same round trip as they do. A statement that fails
// makes PostgreSQL skip everything queued after it, COMMIT included.
type Pipeline struct {
	conn *pgx.Conn
	tx   pgx.Tx // once the first batch has been sent
	b    *pgx.Batch
}

// Queue adds a statement to the next round trip. Set a callback on the
// result (QueryRow, Exec, Query) to read its answer when that round trip
// comes back.
func (p *Pipeline) Queue(sql string, args ...any) *pgx.QueuedQuery {
	return p.b.Queue(sql, args...)
}

// Flush sends every queued statement in one round trip and runs their
// callbacks. After an error the transaction is aborted: return the error.
func (p *Pipeline) Flush(ctx context.Context) error {
	if p.b.Len() == 0 {
		return nil
	}
	b := p.b
	p.b = &pgx.Batch{}
	if p.tx == nil {
		br := p.conn.SendBatch(ctx, b)
		p.tx = br.Tx()
		return br.Close()
	}
	return p.tx.SendBatch(ctx, b).Close()
}

// Tx flushes the queue and returns the transaction, for code that runs its
// statements one at a time (the transfer's side effects, say). Do not
// commit or roll it back: Pipelined does.
func (p *Pipeline) Tx(ctx context.Context) (pgx.Tx, error) {
	if err := p.Flush(ctx); err != nil {
		return nil, err
	}
	return p.tx, nil
}

// Commit sends COMMIT behind whatever is still queued, in one round trip.
func (p *Pipeline) Commit(ctx context.Context) error {
	var rolledBack bool
	p.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		rolledBack = tag.String() == "ROLLBACK"
		return nil
	})
	if err := p.Flush(ctx); err != nil {
		return err
	}
	if rolledBack {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// open reports whether the connection is still inside the transaction
// (in it, or in it and aborted).
func (p *Pipeline) open() bool {
	return p.conn.PgConn().TxStatus() != 'I'
}

// rollbackTimeout bounds the ROLLBACK of a transaction whose work failed.
const rollbackTimeout = 5 * time.Second

// ErrNoPipeline is returned by Pipelined for a DB it cannot take one
// connection from; the caller runs the transaction with InTx instead.
var ErrNoPipeline = errors.New("pipelined transactions need a *pgxpool.Pool or a *pgx.Conn")

// CanPipeline reports whether Pipelined can run on db.
func CanPipeline(db DB) bool {
	switch db.(type) {
	case *pgxpool.Pool, *pgx.Conn:
		return true
	}
	return false
}

// Pipelined runs fn as one pipelined transaction on one connection of db,
// which fn must end with p.Commit. Like InTx, it runs the whole transaction
// again (up to MaxTxAttempts times) when PostgreSQL aborts it for a deadlock
// or a serialization failure; after any other error, or an fn that returns
// without committing, the transaction is rolled back.
func Pipelined(ctx context.Context, db DB, fn func(p *Pipeline) error) error {
	switch db := db.(type) {
	case *pgxpool.Pool:
		return retry(ctx, func() error {
			c, err := db.Acquire(ctx)
			if err != nil {
				return err
			}
			// Release destroys a connection left inside a transaction, which
			// only a rollback that could not be sent leaves.
			defer c.Release()
			return runPipeline(ctx, c.Conn(), fn)
		})
	case *pgx.Conn:
		return retry(ctx, func() error { return runPipeline(ctx, db, fn) })
	}
	return ErrNoPipeline
}

func runPipeline(ctx context.Context, conn *pgx.Conn, fn func(p *Pipeline) error) error {
	p := &Pipeline{conn: conn, b: &pgx.Batch{}}
	p.b.BeginTx(pgx.TxOptions{})
	err := fn(p)
	if p.tx != nil && p.open() {
		// The ROLLBACK goes on a context of its own: the work's may be what
		// ended, and a connection left in a transaction is no use to anyone.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := p.tx.Rollback(rctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		if err == nil {
			err = errors.New("pipelined transaction returned without committing; rolled back")
		}
	}
	return err
}

// Outcome is a pipelined transfer's answer: a refusal, known at once, or a
// 201 whose transfer id the database assigns only when the queued writes
// are sent.
type Outcome struct {
	refusal *Response
	receipt Receipt // TransferID is set when the INSERT's answer is read
	// balanceInSQL is set when the sender's balance after the debit was not
	// known when the answer's statements were queued (a transfer in one
	// round trip): BodySQL then reads it from the sender's row.
	balanceInSQL bool
}

// Refused is the Outcome of a request refused before its transfer ran (a
// body that breaks the input rules).
func Refused(r Response) *Outcome { return &Outcome{refusal: &r} }

// Response is the answer. For a 201, call it only once the round trip that
// carried the transfer's writes has come back.
func (o *Outcome) Response() Response {
	if o.refusal != nil {
		return *o.refusal
	}
	return Created(o.receipt)
}

// Receipt returns the 201's receipt (once the writes are sent), or false
// for a refusal.
func (o *Outcome) Receipt() (Receipt, bool) {
	return o.receipt, o.refusal == nil
}

// Status is the answer's HTTP status, known before the writes are sent.
func (o *Outcome) Status() int {
	if o.refusal != nil {
		return o.refusal.Status
	}
	return 201
}

// LastTransferID is the id of the transfer that this session inserted last:
// the value the INSERT took from transfers_id_seq, the sequence behind
// transfers.id (serial). PostgreSQL keeps it per session, so no other
// connection's transfer can change it. The sequence is named, not looked up
// with pg_get_serial_sequence: a name is resolved once, when the statement
// is prepared, the lookup on every execution.
const LastTransferID = "currval('transfers_id_seq')"

// BodySQL returns the answer's body as a SQL text expression, and its
// arguments, numbered from $n, for a statement queued after the transfer's
// writes in the same round trip: a refusal's bytes as they are; a 201's
// bytes around the transfer id, which only the database knows yet. The
// expression's value is, byte for byte, the body Response will return: the
// two halves are cut from the same json.Marshal at the id, and PostgreSQL
// and encoding/json both write an integer as plain decimal digits.
func (o *Outcome) BodySQL(n int) (expr string, args []any) {
	if o.refusal != nil {
		return fmt.Sprintf("$%d::text", n), []any{string(o.refusal.Body)}
	}
	rc := o.receipt
	rc.TransferID = 0
	head, tail, ok := strings.Cut(string(Created(rc).Body), `"transferId":0`)
	if !ok {
		panic("bank: a receipt's JSON has no transferId member")
	}
	if !o.balanceInSQL {
		return fmt.Sprintf("$%d::text || %s::text || $%d::text", n, LastTransferID, n+1),
			[]any{head + `"transferId":`, tail}
	}
	// The balance is the receipt's last member; its digits are cut out the
	// same way and read from the debited row, which this transaction holds.
	tail, _, ok = strings.Cut(tail, fmt.Sprintf(`"balanceKobo":%d}`, rc.BalanceKobo))
	if !ok {
		panic("bank: a receipt's JSON does not end with its balanceKobo member")
	}
	return fmt.Sprintf("$%d::text || %s::text || $%d::text || (SELECT balance_kobo FROM accounts WHERE id = $%d::bigint)::text || '}'",
			n, LastTransferID, n+1, n+2),
		[]any{head + `"transferId":`, tail + `"balanceKobo":`, rc.From}
}

// PipelinedDebitSQL is the debit of a pipelined transfer. It is not
// conditional: the balance was checked in Go on the row that the first
// round trip locked, which no one else can change before this transaction
// ends. Were the amount somehow not covered, the accounts' CHECK
// (balance_kobo >= 0) would fail the statement and PostgreSQL would skip
// the credit and the COMMIT queued behind it; a conditional debit would
// instead change no row and let them both go through.
const PipelinedDebitSQL = "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2"

// TransferPipelined is Transfer on a Pipeline, with the same rules in the
// same order and the same statements, in fewer round trips: the accounts
// are read and locked in one (with BEGIN, when it is the transaction's
// first); every rule, enough money included, is checked in Go on the locked
// rows; then the debit, the credit and the INSERT are queued, not sent. The
// caller queues whatever else belongs to the transaction (the key's stored
// answer) and commits, which sends them all, COMMIT included, in the second
// round trip. For a refusal nothing is queued.
func TransferPipelined(ctx context.Context, p *Pipeline, userID int64, req TransferRequest) (*Outcome, error) {
	if refusal := checkRequest(req); refusal != nil {
		return Refused(*refusal), nil
	}
	found := map[int64]accountRow{}
	p.Queue(LockAccountsSQL, req.From, req.To).Query(scanAccounts(found))
	if err := p.Flush(ctx); err != nil {
		return nil, fmt.Errorf("read accounts: %w", err)
	}
	if refusal := checkAccounts(found, userID, req); refusal != nil {
		return Refused(*refusal), nil
	}

	if hook := afterChecksFrom(ctx); hook != nil {
		hook()
	}

	balance := found[req.From].balance
	if balance < req.AmountKobo {
		return Refused(insufficient()), nil
	}
	o := &Outcome{receipt: Receipt{From: req.From, To: req.To, AmountKobo: req.AmountKobo, BalanceKobo: balance - req.AmountKobo}}
	p.Queue(PipelinedDebitSQL, req.AmountKobo, req.From)
	p.Queue(CreditSQL, req.AmountKobo, req.To)
	p.Queue(InsertTransferSQL, req.From, req.To, req.AmountKobo, intentArg(ctx)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&o.receipt.TransferID)
	})
	return o, nil
}

// GuardSQL lets a transfer sent in one round trip through only when every
// rule that Transfer checks on the locked rows holds: the sender exists,
// belongs to the user ($1) and is active, the recipient exists and is
// active, and the sender has the amount ($4). Otherwise it fails
// (sqlstateRecheck), PostgreSQL skips the writes and the COMMIT queued
// behind it, and the transfer runs again in two round trips, where Go
// checks the rules and says which one refused. The guard only has to say
// whether; a guard laxer than the Go checks would move money that they
// refuse, so TestGuardRefusesWhatTheChecksRefuse breaks each rule alone.
const GuardSQL = `
	SELECT CASE WHEN EXISTS (
			SELECT FROM accounts
			WHERE id = $2::bigint AND owner_id = $1::bigint AND status = 'active' AND balance_kobo >= $4::bigint)
		AND EXISTS (SELECT FROM accounts WHERE id = $3::bigint AND status = 'active')
	THEN true
	ELSE bank_fail('` + sqlstateRecheck + `', 'a rule refuses this transfer; checking it again step by step') END`

// The writes of a transfer in one round trip: PipelinedDebitSQL (returning
// the sender's new balance, for the receipt), CreditSQL and
// InsertTransferSQL, with the account ids sent as bigint, as the locking
// read and the guard take them. They are queued before anyone has read the
// accounts, so an id beyond integer (which no account has) must still be
// sent; the guard fails for it, and PostgreSQL skips these statements.
const (
	oneTripDebitSQL  = "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2::bigint RETURNING balance_kobo"
	oneTripCreditSQL = "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = $2::bigint"
	oneTripInsertSQL = "INSERT INTO transfers (from_account, to_account, amount_kobo, intent) VALUES ($1::bigint, $2::bigint, $3, $4) RETURNING id"
)

// sqlstateRecheck is the error GuardSQL raises.
const sqlstateRecheck = "BS002"

// NeedsChecks reports whether err is GuardSQL's: the transfer sent in one
// round trip was refused by a rule and nothing was written. Run it again
// with TransferPipelined, which says which rule.
func NeedsChecks(err error) bool {
	return SQLState(err) == sqlstateRecheck
}

// OneTrip reports whether a transfer under ctx may be sent in one round
// trip: not when a hook waits between its checks and its writes
// (WithAfterChecks), a moment that one round trip does not have.
func OneTrip(ctx context.Context) bool {
	return afterChecksFrom(ctx) == nil
}

// TransferOneTrip queues a whole transfer on p without waiting for any
// answer: the locking read of both accounts in id order, GuardSQL, which
// checks every rule on the locked rows before any write, then the debit,
// the credit and the INSERT. The caller queues the key's completion and
// commits: BEGIN to COMMIT in one round trip, so that the accounts' rows
// stay locked only while PostgreSQL works, never while an answer travels.
// The Outcome is a 201 until that round trip says otherwise: when it fails
// with NeedsChecks, nothing was written and the caller runs the request
// again with TransferPipelined. Only a refusal of the body itself is known
// at once.
func TransferOneTrip(ctx context.Context, p *Pipeline, userID int64, req TransferRequest) (*Outcome, error) {
	if refusal := checkRequest(req); refusal != nil {
		return Refused(*refusal), nil
	}
	o := &Outcome{receipt: Receipt{From: req.From, To: req.To, AmountKobo: req.AmountKobo}, balanceInSQL: true}
	// The locking read's rows are not needed here: the guard reads them.
	p.Queue(LockAccountsSQL, req.From, req.To)
	p.Queue(GuardSQL, userID, req.From, req.To, req.AmountKobo)
	p.Queue(oneTripDebitSQL, req.AmountKobo, req.From).QueryRow(func(row pgx.Row) error {
		return row.Scan(&o.receipt.BalanceKobo)
	})
	p.Queue(oneTripCreditSQL, req.AmountKobo, req.To)
	p.Queue(oneTripInsertSQL, req.From, req.To, req.AmountKobo, intentArg(ctx)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&o.receipt.TransferID)
	})
	return o, nil
}

// QueueTransfer queues a transfer's statements on a pipeline:
// TransferOneTrip or TransferPipelined.
type QueueTransfer func(ctx context.Context, p *Pipeline, userID int64, req TransferRequest) (*Outcome, error)

// OneTripFirst runs a pipelined transfer with TransferOneTrip when oneTrip
// is set, and with TransferPipelined when it is not or when the guard
// refused the transfer sent in one round trip (nothing was written then).
func OneTripFirst(oneTrip bool, run func(QueueTransfer) (Response, error)) (Response, error) {
	if oneTrip {
		resp, err := run(TransferOneTrip)
		if !NeedsChecks(err) {
			return resp, err
		}
	}
	return run(TransferPipelined)
}

// PipelinedTransfer runs a transfer in a transaction of its own on db and
// commits it, for a caller with no idempotency key to complete: in one
// round trip (TransferOneTrip) when ctx allows it, and in two
// (TransferPipelined) when it does not or a rule refuses the transfer.
func PipelinedTransfer(ctx context.Context, db DB, userID int64, req TransferRequest) (Response, error) {
	return OneTripFirst(OneTrip(ctx), func(queue QueueTransfer) (Response, error) {
		return pipelinedTransfer(ctx, db, userID, req, queue)
	})
}

// TwoTripTransfer is PipelinedTransfer always in two round trips: the
// accounts locked in the first, the rules checked in Go, the writes and
// COMMIT in the second.
func TwoTripTransfer(ctx context.Context, db DB, userID int64, req TransferRequest) (Response, error) {
	return pipelinedTransfer(ctx, db, userID, req, TransferPipelined)
}

func pipelinedTransfer(ctx context.Context, db DB, userID int64, req TransferRequest, queue QueueTransfer) (Response, error) {
	var out *Outcome
	err := Pipelined(ctx, db, func(p *Pipeline) error {
		var err error
		if out, err = queue(ctx, p, userID, req); err != nil {
			return err
		}
		return p.Commit(ctx)
	})
	if err != nil {
		return Response{}, err
	}
	return out.Response(), nil
}
