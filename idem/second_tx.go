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

// refuseThenStore is the mistake RefusalInSecondTransaction switches on: a
// success is stored with its transfer, as it should be, but a refusal is
// stored in a second transaction, and a failure there (a BeforeCommit fault
// fires in it) is not the client's concern: the key is released and the
// refusal answered anyway. The client holds a final answer; its key is gone.
func (h *Handler) refuseThenStore(ctx context.Context, req Request, claim Claim) (bank.Response, error) {
	var resp bank.Response
	err := bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		var err error
		if resp, err = h.work(ctx, tx, req); err != nil || !resp.OK() {
			return err
		}
		return h.complete(ctx, tx, req, claim, resp)
	})
	if err != nil {
		return bank.Response{}, fmt.Errorf("transfer: %w", err)
	}
	h.afterCommit(ctx, req, resp)
	if resp.OK() {
		return resp, nil
	}
	err = bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		return h.complete(ctx, tx, req, claim, resp)
	})
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		_ = h.Store.Release(rctx, h.DB, req.UserID, req.Key, claim.LockID)
		return resp, nil // the mistake: a refusal its key does not hold
	}
	return resp, nil
}

// refuseOrAnswer500 is the mistake RefusalErrorAsResponse switches on: the
// transfer and its stored answer in one transaction, as they should be, but
// when a refused request's transaction fails after its checks refused it (a
// BeforeCommit fault, a COMMIT that fails), the failure is answered as a 500
// response rather than returned as an error, and Handle, which releases a
// key only on an error, leaves the claim in progress with nobody working on
// it: every retry is told 409 until the lock expires.
func (h *Handler) refuseOrAnswer500(ctx context.Context, req Request, claim Claim) (bank.Response, error) {
	var resp bank.Response
	err := bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		var err error
		if resp, err = h.work(ctx, tx, req); err != nil {
			return err
		}
		return h.complete(ctx, tx, req, claim, resp)
	})
	if err != nil && resp.Status >= 400 {
		return ServerError(), nil // the mistake: an answer, not an error, so the key is not released
	}
	if err != nil {
		return bank.Response{}, fmt.Errorf("transfer: %w", err)
	}
	h.afterCommit(ctx, req, resp)
	return resp, nil
}
