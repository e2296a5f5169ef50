package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/banksim/bank-sim/bank"
)

// The answers of MarkShipped, as the lesson prints them.
const (
	Shipped        = "shipped"
	AlreadyShipped = "already shipped (ok)"
)

// Shipping is the lesson's practice exercise: an operation made naturally
// idempotent, with no key table. The target state says everything, so a
// conditional UPDATE … RETURNING tells whether this call made the change,
// and only when it did not does a second query find out why.
//
// It lives here, beside the outbox, because it is the lesson's other answer
// to "this may run twice": where the outbox keeps a side effect to exactly
// one per commit, a naturally idempotent operation needs no bookkeeping at
// all.
type Shipping struct {
	DB    bank.Querier
	Flaws Flaws
	// AfterRead, when set, runs in the read-then-write mistake between its
	// read and its write: a scenario stages two calls there at once.
	AfterRead func()
}

// MarkShipped ships order id if it is paid, and answers as the lesson does:
// "shipped", "already shipped (ok)", "error: order is cancelled", "error:
// order is missing". Calling it twice has the effect of calling it once, and
// the second call is still a success; of two calls at once, exactly one
// answers "shipped".
func (s *Shipping) MarkShipped(ctx context.Context, id int) (string, error) {
	if s.Flaws.ShipReadThenWrite {
		return s.readThenWrite(ctx, id)
	}
	var got int
	err := s.DB.QueryRow(ctx,
		"UPDATE orders SET status = 'shipped' WHERE id = $1 AND status = 'paid' RETURNING id", id).Scan(&got)
	if err == nil {
		return Shipped, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("ship order %d: %w", id, err)
	}
	return s.why(ctx, id)
}

// why says why an order was not changed.
func (s *Shipping) why(ctx context.Context, id int) (string, error) {
	var status string
	err := s.DB.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "error: order is missing", nil
	case err != nil:
		return "", fmt.Errorf("read order %d: %w", id, err)
	case status == "shipped":
		return AlreadyShipped, nil
	}
	return "error: order is " + status, nil
}

// readThenWrite is the mistake ShipReadThenWrite switches on: the check is
// in Go, on a status read before the write, and the write is unconditional.
// Alone it prints the lesson's four answers; two calls at once both read
// 'paid' and both answer "shipped", and a cancellation between the read and
// the write is overwritten.
func (s *Shipping) readThenWrite(ctx context.Context, id int) (string, error) {
	var status string
	err := s.DB.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "error: order is missing", nil
	case err != nil:
		return "", fmt.Errorf("read order %d: %w", id, err)
	case status == "shipped":
		return AlreadyShipped, nil
	case status != "paid":
		return "error: order is " + status, nil
	}
	if s.AfterRead != nil {
		s.AfterRead()
	}
	if _, err := s.DB.Exec(ctx, "UPDATE orders SET status = 'shipped' WHERE id = $1", id); err != nil {
		return "", fmt.Errorf("ship order %d: %w", id, err)
	}
	return Shipped, nil
}
