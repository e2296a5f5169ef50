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
}

// Transfer moves money between two accounts inside the caller's transaction,
// checking every rule of the lesson before the first write. Refusals are
// returned as Responses; the error is only for failures of the database
// itself, after which the caller must roll back.
//
// Unlike the lesson, it locks both account rows, in id order: locking only the
// sender deadlocks whenever two transfers cross (A→B while B→A).
func Transfer(ctx context.Context, tx Querier, userID int64, req TransferRequest) (Response, error) {
	return TransferWith(ctx, tx, userID, req, Flaws{})
}

// TransferWith is Transfer with some of the lesson's mistakes switched on.
func TransferWith(ctx context.Context, tx Querier, userID int64, req TransferRequest, flaws Flaws) (Response, error) {
	if req.From <= 0 || req.To <= 0 {
		return Reject(400, CodeInvalidAccount, "from and to must be account numbers"), nil
	}
	if req.AmountKobo <= 0 {
		return Reject(400, CodeInvalidAmount, "amountKobo must be a whole number of kobo above 0"), nil
	}
	if req.From == req.To {
		return Reject(422, CodeSameAccount, "You cannot transfer to the same account"), nil
	}

	var readEarly int64
	if flaws.ReadCompareWrite {
		err := tx.QueryRow(ctx, "SELECT balance_kobo FROM accounts WHERE id = $1::bigint", req.From).Scan(&readEarly)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Response{}, fmt.Errorf("read balance: %w", err)
		}
	}
	found, err := lockAccounts(ctx, tx, req, flaws)
	if err != nil {
		return Response{}, err
	}

	sender, ok := found[req.From]
	if !ok || sender.owner != userID {
		// The same answer for a missing account and someone else's, so that a
		// stranger learns nothing about which account numbers exist.
		return Rejectf(404, CodeAccountNotFound, "Account %d was not found", req.From), nil
	}
	if sender.status != "active" {
		return Rejectf(422, CodeAccountNotActive, "Account %d is %s", req.From, sender.status), nil
	}
	if recipient, ok := found[req.To]; !ok || recipient.status != "active" {
		return Rejectf(422, CodeRecipientUnavailable, "Account %d cannot receive transfers", req.To), nil
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
	} else {
		err := tx.QueryRow(ctx,
			"UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2 AND balance_kobo >= $1 RETURNING balance_kobo",
			req.AmountKobo, req.From).Scan(&balance)
		if errors.Is(err, pgx.ErrNoRows) {
			return insufficient(), nil
		}
		if err != nil {
			return Response{}, fmt.Errorf("debit: %w", err)
		}
	}

	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance_kobo = balance_kobo + $1 WHERE id = $2", req.AmountKobo, req.To); err != nil {
		return Response{}, fmt.Errorf("credit: %w", err)
	}
	var id int64
	if err := tx.QueryRow(ctx,
		"INSERT INTO transfers (from_account, to_account, amount_kobo, intent) VALUES ($1, $2, $3, $4) RETURNING id",
		req.From, req.To, req.AmountKobo, intentArg(ctx)).Scan(&id); err != nil {
		return Response{}, fmt.Errorf("record transfer: %w", err)
	}
	return Created(Receipt{TransferID: id, From: req.From, To: req.To, AmountKobo: req.AmountKobo, BalanceKobo: balance}), nil
}

type accountRow struct {
	owner   int64
	status  string
	balance int64
}

// lockAccounts reads both accounts, locking their rows in id order so that
// two transfers between the same accounts always queue the same way round.
// The ids are compared as bigint: accounts.id is an integer, and an id
// beyond it (2147483648) is an account that does not exist, not a query that
// cannot be sent.
func lockAccounts(ctx context.Context, tx Querier, req TransferRequest, flaws Flaws) (map[int64]accountRow, error) {
	found := map[int64]accountRow{}
	read := func(query string, args ...any) error {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("read accounts: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var r accountRow
			if err := rows.Scan(&id, &r.owner, &r.status, &r.balance); err != nil {
				return fmt.Errorf("read accounts: %w", err)
			}
			found[id] = r
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read accounts: %w", err)
		}
		return nil
	}
	const cols = "SELECT id, owner_id, status, balance_kobo FROM accounts WHERE "
	switch {
	case flaws.NoRowLock:
		return found, read(cols+"id IN ($1::bigint, $2::bigint)", req.From, req.To)
	case flaws.SenderLockOnly:
		if err := read(cols+"id = $1::bigint FOR UPDATE", req.From); err != nil {
			return nil, err
		}
		return found, read(cols+"id = $1::bigint", req.To)
	default:
		return found, read(cols+"id IN ($1::bigint, $2::bigint) ORDER BY id FOR UPDATE", req.From, req.To)
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
