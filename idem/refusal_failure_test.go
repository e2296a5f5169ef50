package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// A refused request whose transaction fails before its COMMIT: the correct
// handler returns the error and releases the key, so the retry is refused
// afresh; RefusalErrorAsResponse answers a 500 response instead, releases
// nothing, and the retry is told 409 while the lock holds.
func TestRefusalErrorAsResponseLeavesTheKeyInProgress(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 4)
	const tooMuch = `{"from":2,"to":1,"amountKobo":9000000}`
	failing := idem.WithHooks(context.Background(), idem.Hooks{BeforeCommit: func(context.Context) error {
		return errors.New("the connection broke just before COMMIT")
	}})
	for _, flaw := range []bool{false, true} {
		key := "refused-then-failed-correct"
		if flaw {
			key = "refused-then-failed-flawed"
		}
		h := &idem.Handler{DB: pool, Store: &idem.Store{}, RefusalErrorAsResponse: flaw}
		resp, err := h.Handle(failing, idem.Request{UserID: 2, Key: key, Body: []byte(tooMuch)})
		var status string
		if qerr := pool.QueryRow(context.Background(), "SELECT status FROM idempotency_keys WHERE user_id = 2 AND key = $1", key).Scan(&status); qerr != nil {
			status = "none"
		}
		retry := handle(t, h, 2, key, []byte(tooMuch))
		if !flaw {
			if err == nil || status != "none" || retry.Status != 422 || retry.Code() != bank.CodeInsufficientFunds {
				t.Errorf("correct: error %v, key %s, retry %s; want an error, no key, and the retry refused afresh (422)", err, status, retry.Summary())
			}
			continue
		}
		if err != nil || resp.Status != 500 || status != "in_progress" || retry.Status != 409 {
			t.Errorf("flawed: %s, error %v, key %s, retry %s; want a 500 response and no error, the key in progress, the retry told 409", resp.Summary(), err, status, retry.Summary())
		}
	}
}
