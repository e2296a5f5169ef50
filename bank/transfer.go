package bank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER. The lesson's rules
// are written for JSON clients, and a JSON number above it cannot be trusted
// to arrive intact in most of them.
const maxSafeInteger = 1<<53 - 1

// TransferRequest is the body of POST /transfers once it has been checked:
// from and to are account numbers, amountKobo a positive whole number of kobo.
type TransferRequest struct {
	From       int64 `json:"from"`
	To         int64 `json:"to"`
	AmountKobo int64 `json:"amountKobo"`
}

// Body is the request as a client sends it.
func (r TransferRequest) Body() []byte {
	b, _ := json.Marshal(r)
	return b
}

// ParseTransferRequest applies the lesson's input rules to a raw JSON body.
// A refusal comes back as a Response (400 invalid_account or invalid_amount),
// because a bad request is an answer, not an error.
func ParseTransferRequest(body []byte) (TransferRequest, *Response) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil || !atEOF(dec) {
		r := Reject(400, CodeInvalidRequest, "The body must be a JSON object with from, to and amountKobo")
		return TransferRequest{}, &r
	}
	from, okFrom := safeInteger(fields["from"])
	to, okTo := safeInteger(fields["to"])
	if !okFrom || !okTo {
		r := Reject(400, CodeInvalidAccount, "from and to must be account numbers")
		return TransferRequest{}, &r
	}
	amount, ok := safeInteger(fields["amountKobo"])
	if !ok || amount <= 0 {
		r := Reject(400, CodeInvalidAmount, "amountKobo must be a whole number of kobo above 0")
		return TransferRequest{}, &r
	}
	return TransferRequest{From: from, To: to, AmountKobo: amount}, nil
}

// atEOF reports whether nothing but whitespace follows the decoded value, so
// that `{…} garbage` and `{…}}` are refused as JSON.parse refuses them.
func atEOF(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}

// safeInteger accepts what Number.isSafeInteger accepts: a JSON number with
// an integral value of magnitude at most 2^53-1 (so 1e3 is 1000, 10.5 is not).
func safeInteger(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || raw[0] == '"' || raw[0] == '{' || raw[0] == '[' {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, n >= -maxSafeInteger && n <= maxSafeInteger
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// Flaws switches on mistakes that the lesson warns against, so that the
// simulator can show what they cost. The zero value is the correct transfer.
type Flaws struct {
	// ReadCompareWrite reads the balance in a statement of its own before
	// the account rows are locked, compares it in Go and writes the new
	// balance back as a number, instead of one conditional UPDATE. The row
	// lock that comes after the read protects nothing: another transfer's
	// debit between the read and the write is overwritten.
	ReadCompareWrite bool
	// NoRowLock reads the accounts without FOR UPDATE. The conditional debit
	// still keeps balances right, but the checks of status and owner are
	// made on rows that can change before the transaction commits: an
	// account frozen meanwhile is debited anyway.
	NoRowLock bool
	// SenderLockOnly locks only the sender's row, as the lesson does. Two
	// transfers that cross (A→B while B→A) then each hold one row and wait
	// for the other's: a deadlock that PostgreSQL breaks after
	// deadlock_timeout (1 s), which collapses throughput on hot accounts.
	SenderLockOnly bool
	// FrozenOnly takes "frozen" for the only status that stops a transfer,
	// as if an account were either active or frozen: a closed account
	// sends and receives money.
	FrozenOnly bool
	// CreditSecondRow credits the second of the two rows the locking read
	// returned, taking it for the recipient: the rows come in id order, so
	// a transfer to a lower account number credits its own sender.
	CreditSecondRow bool
	// OwnAccountsUnchecked debits without the funds condition when both
	// accounts belong to the same user, as if a move between a customer's
	// own accounts could not overdraw: no money leaves the customer, but one
	// of their accounts goes below zero, and what it lent is spent from the
	// other.
	OwnAccountsUnchecked bool
	// OneLockPerCustomer serializes each customer's transfers on one row,
	// their first account's, and reads the two accounts without FOR
	// UPDATE, as if a customer's transfers could only race one another.
	// Where each customer has one account, that row is the sender's, and a
	// freeze waits for the transfer; but a customer's other account is
	// checked on a row nothing holds, and frozen between the transfer's
	// checks and its debit it is debited anyway. (The recipient's row,
	// locked only by the credit, lets crossing transfers deadlock:
	// PostgreSQL aborts one, and InTx runs it again.)
	OneLockPerCustomer bool
	// ClosedCheckedLast leaves the closed-account rule out of the
	// transfer's checks (they refuse frozen accounts only, as if an account
	// were either active or frozen) and checks it where the answer is
	// built, after the transfer and its side effects are written
	// (CheckAccountsAfter, in the handler). Its refusal is stored with the
	// request, in the request's transaction, as every refusal is: the
	// transfer it follows commits with it, and its client is told 422.
	ClosedCheckedLast bool
	// ReceiptLastValue reads the answer's transfer id back from the
	// sequence behind transfers.id where the answer is built, after the
	// side effects, with SELECT last_value FROM transfers_id_seq
	// (SequenceLastValueSQL) instead of currval (LastTransferID): the two
	// are the same number while one session inserts, and a test on one
	// connection cannot tell them apart. But last_value is the sequence's,
	// every session's: when another request takes an id after this
	// transfer's INSERT and before the read, this client is told that
	// request's transfer (or, should it roll back, an id no transfer has).
	// The side effects, written first with the INSERT's own id, are right;
	// the receipt, stored as the key's answer and replayed, names another
	// intent's transfer.
	ReceiptLastValue bool
	// CreditByCustomer credits the payee's customer rather than the account
	// named: the customer's first account (the lowest id they own), as if
	// paying a customer were paying their main account. Where each customer
	// has one account that is the account named; a payment to a customer's
	// other account lands in their first one, which may be frozen or
	// closed. The total is kept, and the transfer's row and receipt name
	// the account asked for: only each balance against its ledger tells.
	CreditByCustomer bool
	// OwnCreditInSecondTransaction leaves the credit of a move between two
	// accounts of the sender's out of the transfer's transaction and makes
	// it in a transaction of its own once that one has committed
	// (CreditOwnAccount, from the handler), on the reasoning that money
	// that stays with its customer cannot be refused (both accounts were
	// checked and are theirs) and need not hold the transfer's row locks.
	// The debit, the transfer's row, its side effects and its answer commit
	// first: until the credit commits, the customer's money is in neither
	// account, and a snapshot of every balance taken meanwhile is short by
	// the amount; the final balances add up. A payment to another
	// customer is credited in the transaction, as before.
	OwnCreditInSecondTransaction bool
	// OwnFundsReadOnArrival checks the funds of a move between two
	// accounts of one customer on the sender's balance as the handler read
	// it when the request arrived, before its key was claimed
	// (ReadBalanceOnArrival), the way an app checks what a screen or an
	// authorization step loaded, and debits the sender with balance_kobo -
	// amount, without the funds condition, as if that check had settled it.
	// A payment to another customer keeps the conditional debit, so where
	// each customer has one account nothing changes. A debit of the sender
	// that commits between that read and the move's row lock is not seen:
	// the move overdraws the account, and only the accounts table's CHECK
	// (balance_kobo >= 0) stops it (a 500; see NoBalanceFloor).
	OwnFundsReadOnArrival bool
	// NoBalanceFloor is the schema's mistake, not the transfer's: the
	// accounts table has no CHECK (balance_kobo >= 0) (DropBalanceFloorSQL,
	// run by whoever opens the bank for a run with it), as many a schema
	// leaves the floor to the application. The correct transfer never
	// needs the CHECK; a transfer whose funds check has a hole
	// (OwnFundsReadOnArrival) then commits a balance below zero instead of
	// failing.
	NoBalanceFloor bool
}

// The statements of the transfer, named so that a tool that replays the
// transfer's SQL elsewhere (bench --vs-pgbench runs them in pgbench) sends
// exactly what bank-sim sends.
const (
	// LockAccountsSQL reads both accounts and locks their rows in id order,
	// so that two transfers between the same accounts always queue the same
	// way round. The ids are compared as bigint: accounts.id is an integer,
	// and an id beyond it (2147483648) is an account that does not exist,
	// not a query that cannot be sent.
	LockAccountsSQL = accountColumns + "id IN ($1::bigint, $2::bigint) ORDER BY id FOR UPDATE"
	// DebitSQL is the lesson's conditional debit: it changes no row when
	// the balance is too low, and returns the new balance when it does not.
	DebitSQL = "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2 AND balance_kobo >= $1 RETURNING balance_kobo"
	// CreditSQL credits the recipient.
	CreditSQL = "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = $2"
	// CreditCustomerSQL is the credit-by-customer mistake's credit: the
	// first account of the recipient's owner.
	CreditCustomerSQL = "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = (SELECT min(id) FROM accounts WHERE owner_id = (SELECT owner_id FROM accounts WHERE id = $2))"
	// CreditOwnAccountSQL is the own-credit-in-second-transaction
	// mistake's credit, after the transfer's commit: the recipient, if the
	// sender's customer owns it.
	CreditOwnAccountSQL = "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = $2 AND owner_id = $3"
	// UncheckedDebitSQL is a debit without the funds condition:
	// own-accounts-unchecked's, and no-balance-floor's
	// (OwnFundsReadOnArrival).
	UncheckedDebitSQL = "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2 RETURNING balance_kobo"
	// ReadBalanceSQL reads one account's balance without locking its row:
	// the read read-compare-write makes before the locks, and
	// ReadBalanceOnArrival's.
	ReadBalanceSQL = "SELECT balance_kobo FROM accounts WHERE id = $1::bigint"
	// DropBalanceFloorSQL is the NoBalanceFloor mistake's schema: the
	// accounts table without its CHECK (balance_kobo >= 0), which
	// PostgreSQL named after the table and column (Schema names none). A
	// recycled bank gets it back when it is reset (banks.Recycled).
	DropBalanceFloorSQL = "ALTER TABLE accounts DROP CONSTRAINT accounts_balance_kobo_check"
	// InsertTransferSQL records the transfer, labelled with its intent (see
	// Schema), and returns its id.
	InsertTransferSQL = "INSERT INTO transfers (from_account, to_account, amount_kobo, intent) VALUES ($1, $2, $3, $4) RETURNING id"

	// LockCustomerSQL is the one-lock-per-customer mistake's lock: the row
	// of the customer's first account.
	LockCustomerSQL = "SELECT 1 FROM accounts WHERE owner_id = $1::bigint ORDER BY id LIMIT 1 FOR UPDATE"

	// LockSenderSQL and ReadRecipientSQL are how the lesson reads the two
	// accounts (the sender-lock-only mistake): crossing transfers deadlock.
	LockSenderSQL    = accountColumns + "id = $1::bigint FOR UPDATE"
	ReadRecipientSQL = accountColumns + "id = $1::bigint"

	accountColumns = "SELECT id, owner_id, status, balance_kobo FROM accounts WHERE "

	// SequenceLastValueSQL is the receipt-last-value mistake's read of the
	// transfer's id: the last value transfers_id_seq gave to any session,
	// not to this one (see ReceiptLastValue).
	SequenceLastValueSQL = "SELECT last_value FROM transfers_id_seq"
)

// Transfer moves money between two accounts inside the caller's transaction,
// checking every rule of the lesson before the first write. Refusals are
// returned as Responses; the error is only for failures of the database
// itself, after which the caller must roll back.
//
// Unlike the lesson, it locks both account rows, in id order: locking only the
// sender deadlocks whenever two transfers cross (A→B while B→A).
//
// Transfer sends its statements one at a time, each waiting for the answer
// to the one before; TransferPipelined is the same transfer in two round
// trips, and TransferOneTrip in one.
func Transfer(ctx context.Context, tx Querier, userID int64, req TransferRequest) (Response, error) {
	return TransferWith(ctx, tx, userID, req, Flaws{})
}

// TransferWith is Transfer with some of the lesson's mistakes switched on.
func TransferWith(ctx context.Context, tx Querier, userID int64, req TransferRequest, flaws Flaws) (Response, error) {
	if refusal := checkRequest(req); refusal != nil {
		return *refusal, nil
	}

	var readEarly int64
	if flaws.ReadCompareWrite {
		err := tx.QueryRow(ctx, ReadBalanceSQL, req.From).Scan(&readEarly)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Response{}, fmt.Errorf("read balance: %w", err)
		}
	}
	found, err := lockAccounts(ctx, tx, userID, req, flaws)
	if err != nil {
		return Response{}, err
	}
	if refusal := checkAccountsWith(found, userID, req, flaws); refusal != nil {
		return *refusal, nil
	}

	if hook := afterChecksFrom(ctx); hook != nil {
		hook()
	}

	var balance int64
	if flaws.ReadCompareWrite {
		// The gap the lesson warns about: another transfer can run between the
		// read and the write, and both will think the money is there.
		balance = readEarly
		if balance < req.AmountKobo {
			return insufficient(), nil
		}
		balance -= req.AmountKobo
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance_kobo = $1 WHERE id = $2", balance, req.From); err != nil {
			return Response{}, fmt.Errorf("debit: %w", err)
		}
	} else if flaws.OwnAccountsUnchecked && found[req.From].owner == found[req.To].owner {
		// The mistake: the funds condition dropped between one user's accounts.
		if err := tx.QueryRow(ctx, UncheckedDebitSQL, req.AmountKobo, req.From).Scan(&balance); err != nil {
			return Response{}, fmt.Errorf("debit: %w", err)
		}
	} else if flaws.OwnFundsReadOnArrival && found[req.From].owner == found[req.To].owner {
		// The mistake: the funds checked on the balance read as the request
		// arrived (the locked row's when none was), the debit unconditional.
		seen, ok := balanceOnArrival(ctx)
		if !ok {
			seen = found[req.From].balance
		}
		if seen < req.AmountKobo {
			return insufficient(), nil
		}
		if err := tx.QueryRow(ctx, UncheckedDebitSQL, req.AmountKobo, req.From).Scan(&balance); err != nil {
			return Response{}, fmt.Errorf("debit: %w", err)
		}
	} else {
		err := tx.QueryRow(ctx, DebitSQL, req.AmountKobo, req.From).Scan(&balance)
		if errors.Is(err, pgx.ErrNoRows) {
			return insufficient(), nil
		}
		if err != nil {
			return Response{}, fmt.Errorf("debit: %w", err)
		}
	}

	credited := req.To
	if flaws.CreditSecondRow {
		credited = max(req.From, req.To) // the mistake: the second row, not the recipient's
	}
	credit := CreditSQL
	if flaws.CreditByCustomer {
		credit = CreditCustomerSQL // the mistake: the payee's first account, not the one named
	}
	// The own-credit-in-second-transaction mistake: a move between the
	// customer's own accounts is credited after the commit
	// (CreditOwnAccount), not here.
	later := flaws.OwnCreditInSecondTransaction && found[req.From].owner == found[req.To].owner
	if !later {
		if _, err := tx.Exec(ctx, credit, req.AmountKobo, credited); err != nil {
			return Response{}, fmt.Errorf("credit: %w", err)
		}
	}
	var id int64
	if err := tx.QueryRow(ctx, InsertTransferSQL, req.From, req.To, req.AmountKobo, intentArg(ctx)).Scan(&id); err != nil {
		return Response{}, fmt.Errorf("record transfer: %w", err)
	}
	return Created(Receipt{TransferID: id, From: req.From, To: req.To, AmountKobo: req.AmountKobo, BalanceKobo: balance}), nil
}

// CreditOwnAccount is the own-credit-in-second-transaction mistake's second
// transaction: once the transfer rc has committed, it credits rc's
// recipient if userID's customer owns it (a move between their own
// accounts, whose credit the transfer left out), and nothing otherwise.
func CreditOwnAccount(ctx context.Context, db DB, userID int64, rc Receipt) error {
	return InTx(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, CreditOwnAccountSQL, rc.AmountKobo, rc.To, userID)
		return err
	})
}

// checkRequest applies the rules that need no account: a refusal, or nil.
func checkRequest(req TransferRequest) *Response {
	var r Response
	switch {
	case req.From <= 0 || req.To <= 0:
		r = Reject(400, CodeInvalidAccount, "from and to must be account numbers")
	case req.AmountKobo <= 0:
		r = Reject(400, CodeInvalidAmount, "amountKobo must be a whole number of kobo above 0")
	case req.From == req.To:
		r = Reject(422, CodeSameAccount, "You cannot transfer to the same account")
	default:
		return nil
	}
	return &r
}

// checkAccounts applies the rules about the two accounts, read (and, in
// the correct transfer, locked) in found: a refusal, or nil. Enough money
// is not among them: the debit is where that is decided.
func checkAccounts(found map[int64]accountRow, userID int64, req TransferRequest) *Response {
	return checkAccountsWith(found, userID, req, Flaws{})
}

// checkAccountsWith is checkAccounts with the lesson's mistakes.
func checkAccountsWith(found map[int64]accountRow, userID int64, req TransferRequest, flaws Flaws) *Response {
	var r Response
	sender, ok := found[req.From]
	recipient, okTo := found[req.To]
	inactive := func(a accountRow) bool {
		if flaws.FrozenOnly || flaws.ClosedCheckedLast {
			return a.status == "frozen" // the mistake: closed is not frozen
		}
		return a.status != "active"
	}
	switch {
	case !ok || sender.owner != userID:
		// The same answer for a missing account and someone else's, so that a
		// stranger learns nothing about which account numbers exist.
		r = Rejectf(404, CodeAccountNotFound, "Account %d was not found", req.From)
	case inactive(sender):
		r = Rejectf(422, CodeAccountNotActive, "Account %d is %s", req.From, sender.status)
	case !okTo || inactive(recipient):
		r = Rejectf(422, CodeRecipientUnavailable, "Account %d cannot receive transfers", req.To)
	default:
		return nil
	}
	return &r
}

// CheckAccountsAfter applies every rule about the request and its two
// accounts, read in tx, as the transfer's checks do before its first
// write: a refusal, or nil. The ClosedCheckedLast mistake calls it after
// the transfer has written, in place of the checks the transfer skipped.
func CheckAccountsAfter(ctx context.Context, tx Querier, userID int64, req TransferRequest) (*Response, error) {
	if refusal := checkRequest(req); refusal != nil {
		return refusal, nil
	}
	found, err := lockAccounts(ctx, tx, userID, req, Flaws{NoRowLock: true})
	if err != nil {
		return nil, err
	}
	return checkAccounts(found, userID, req), nil
}

type accountRow struct {
	owner   int64
	status  string
	balance int64
}

// scanAccounts reads the rows of an accountColumns query into found.
func scanAccounts(found map[int64]accountRow) func(rows pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			var r accountRow
			if err := rows.Scan(&id, &r.owner, &r.status, &r.balance); err != nil {
				return err
			}
			found[id] = r
		}
		return rows.Err()
	}
}

// lockAccounts reads both accounts with LockAccountsSQL, or as one of the
// lesson's mistakes reads them (and locks what they lock).
func lockAccounts(ctx context.Context, tx Querier, userID int64, req TransferRequest, flaws Flaws) (map[int64]accountRow, error) {
	found := map[int64]accountRow{}
	read := func(query string, args ...any) error {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("read accounts: %w", err)
		}
		defer rows.Close()
		if err := scanAccounts(found)(rows); err != nil {
			return fmt.Errorf("read accounts: %w", err)
		}
		return nil
	}
	switch {
	case flaws.NoRowLock:
		return found, read(accountColumns+"id IN ($1::bigint, $2::bigint)", req.From, req.To)
	case flaws.OneLockPerCustomer:
		// The mistake: the customer's first account is locked, not the two read.
		if _, err := tx.Exec(ctx, LockCustomerSQL, userID); err != nil {
			return nil, fmt.Errorf("lock the customer: %w", err)
		}
		return found, read(accountColumns+"id IN ($1::bigint, $2::bigint)", req.From, req.To)
	case flaws.SenderLockOnly:
		if err := read(LockSenderSQL, req.From); err != nil {
			return nil, err
		}
		return found, read(ReadRecipientSQL, req.To)
	default:
		return found, read(LockAccountsSQL, req.From, req.To)
	}
}

func insufficient() Response {
	return Reject(422, CodeInsufficientFunds, "The balance is too low for this transfer")
}

// NaiveTransfer is the lesson's first attempt: three statements with no
// transaction and no checks. It exists to be shown failing. creditRows is the
// number of rows the credit changed (0 for a missing recipient, which SQL does
// not treat as an error).
func NaiveTransfer(ctx context.Context, q Querier, req TransferRequest) (creditRows int64, err error) {
	if _, err := q.Exec(ctx, "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2", req.AmountKobo, req.From); err != nil {
		return 0, err
	}
	tag, err := q.Exec(ctx, "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = $2", req.AmountKobo, req.To)
	if err != nil {
		return 0, err
	}
	_, err = q.Exec(ctx, "INSERT INTO transfers (from_account, to_account, amount_kobo, intent) VALUES ($1, $2, $3, $4)",
		req.From, req.To, req.AmountKobo, intentArg(ctx))
	return tag.RowsAffected(), err
}
