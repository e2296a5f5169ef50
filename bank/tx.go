package bank

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxTxAttempts bounds how often InTx runs a transaction that PostgreSQL
// aborted for a deadlock or a serialization failure.
const MaxTxAttempts = 5

type intentKey struct{}

type afterChecksKey struct{}

type txRetryKey struct{}

type balanceOnArrivalKey struct{}

// ReadBalanceOnArrival is the first half of the OwnFundsReadOnArrival
// mistake, the handler's: it reads the sender's balance as a request
// arrives, before the request's key is claimed and its transaction begins
// (ReadBalanceSQL, no lock), and returns ctx carrying it to the transfer,
// which checks a move between the customer's own accounts on it. An
// account that does not exist reads as ₦0: the transfer refuses it anyway.
func ReadBalanceOnArrival(ctx context.Context, q Querier, from int64) (context.Context, error) {
	var balance int64
	if err := q.QueryRow(ctx, ReadBalanceSQL, from).Scan(&balance); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ctx, fmt.Errorf("read the balance on arrival: %w", err)
	}
	return context.WithValue(ctx, balanceOnArrivalKey{}, balance), nil
}

// balanceOnArrival is the balance ReadBalanceOnArrival read, if it did.
func balanceOnArrival(ctx context.Context) (int64, bool) {
	b, ok := ctx.Value(balanceOnArrivalKey{}).(int64)
	return b, ok
}

// WithTxRetry makes InTx under ctx call hook with the error each time it
// runs a transaction again after a deadlock or serialization failure. It
// changes nothing else: it is how a harness sees that the retry path was
// taken, and how a test counts deadlocks as they happen.
func WithTxRetry(ctx context.Context, hook func(err error)) context.Context {
	return context.WithValue(ctx, txRetryKey{}, hook)
}

// WithAfterChecks makes every transfer under ctx call hook after its checks
// and before its first write: the moment a concurrent change (a freeze, say)
// is most dangerous. Scenarios use it to stage a race exactly, rather than
// hope for one.
func WithAfterChecks(ctx context.Context, hook func()) context.Context {
	return context.WithValue(ctx, afterChecksKey{}, hook)
}

func afterChecksFrom(ctx context.Context) func() {
	h, _ := ctx.Value(afterChecksKey{}).(func())
	return h
}

// WithIntent labels the transfers written under ctx with the client intent
// that asked for them. Only the checker reads the label; see Schema.
func WithIntent(ctx context.Context, intent string) context.Context {
	return context.WithValue(ctx, intentKey{}, intent)
}

// IntentFrom returns the label set by WithIntent, or "".
func IntentFrom(ctx context.Context) string {
	s, _ := ctx.Value(intentKey{}).(string)
	return s
}

func intentArg(ctx context.Context) any {
	if s := IntentFrom(ctx); s != "" {
		return s
	}
	return nil
}

// Retryable reports whether err is a deadlock (40P01) or a serialization
// failure (40001): PostgreSQL rolled the transaction back and running it
// again is safe and expected to succeed.
func Retryable(err error) bool {
	code := SQLState(err)
	return code == "40P01" || code == "40001"
}

// SQLState is the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when err did not come from PostgreSQL.
func SQLState(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// InTx runs fn in a transaction and commits it, running the whole transaction
// again (up to MaxTxAttempts times) when PostgreSQL aborts it for a deadlock or
// serialization failure, so that neither ever reaches a client as a 500.
func InTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	return retry(ctx, func() error { return pgx.BeginFunc(ctx, db, fn) })
}

// retry runs attempt, a whole transaction, and runs it again (up to
// MaxTxAttempts times in all) while it fails with a deadlock or a
// serialization failure.
func retry(ctx context.Context, attempt func() error) error {
	var err error
	for n := 1; n <= MaxTxAttempts; n++ {
		err = attempt()
		if !Retryable(err) || n == MaxTxAttempts {
			return err
		}
		if hook, _ := ctx.Value(txRetryKey{}).(func(error)); hook != nil {
			hook(err)
		}
		// A short, growing pause lets the transaction that won go first.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(n*n) * time.Millisecond):
		}
	}
	return err
}
