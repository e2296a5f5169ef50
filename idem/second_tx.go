package idem

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// transferThenStore is the mistake SecondTransaction switches on: the
// transfer commits in one transaction and its response is stored in another.
// The BeforeCommit hook runs before the second commit, which is where a crash
// does the damage: the money has moved and the key knows nothing about it.
func (h *Handler) transferThenStore(ctx context.Context, req Request, claim Claim) (bank.Response, error) {
	var resp bank.Response
	err := bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		var err error
		resp, err = h.work(ctx, tx, req)
		return err
	})
	if err != nil {
		return bank.Response{}, fmt.Errorf("transfer: %w", err)
	}
	h.afterCommit(ctx, req, resp)
	err = bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		return h.complete(ctx, tx, req, claim, resp)
	})
	if err != nil {
		return bank.Response{}, fmt.Errorf("store the response: %w", err)
	}
	return resp, nil
}
