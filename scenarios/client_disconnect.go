package scenarios

import (
	"context"
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Ada's phone loses its signal in the middle of four transfers, each time
// at another point of the server's work: before the key is claimed, while
// the claim's answer is on its way back, just after it, and inside the
// transaction. Each time the app retries with the same key.
func init() {
	points := []faults.DisconnectPoint{faults.BeforeClaim, faults.DuringClaim, faults.AfterClaim, faults.InTransaction}
	story := func(ctx context.Context, r *Run, onRequestContext, protected bool) error {
		h := r.Handler(nil)
		h.ClaimOnRequestContext = onRequestContext
		var answers []bank.Response
		for i, at := range points {
			amount := int64(i+1) * 100_000
			in := Intent{Label: fmt.Sprintf("ada-disconnect-%d", i+1), UserID: 1, Key: r.Key(),
				Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: amount}}
			net := r.Network(h, nil).On(&faults.Disconnect{At: at}, 1)
			r.Step("Ada sends %s; her phone loses its signal %s", bank.Naira(amount), at)
			resp, _ := r.SendWithRetries(ctx, net, in, 3)
			answers = append(answers, resp)
		}
		// Every handler has returned by now (Disconnect waits for it): a key
		// still in progress has nobody working on it, and blocks its intent.
		stuck, err := keysInProgress(ctx, r)
		if err != nil {
			return err
		}
		detail := "every key is completed or was released"
		if len(stuck) > 0 {
			detail = fmt.Sprintf("%s in progress with no request working on %s: %s", plural(len(stuck), "key", "keys"),
				map[bool]string{true: "it", false: "them"}[len(stuck) == 1], strings.Join(stuck, ", "))
		}
		r.Invariant("no key is left in progress after its holder returned", len(stuck) == 0, detail)
		if protected {
			for i, at := range points {
				r.Expect(answers[i].Status == 201, "disconnected %s: the retry is answered 201", at)
			}
			r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
			r.ExpectTransfers(ctx, 4)
		} else {
			r.Expect(answers[1].Status == 409 && answers[1].Code() == idem.CodeInProgress,
				"disconnected while the claim's answer was on its way: every retry is told 409, by a key nobody is working on")
		}
		return nil
	}

	Register(Scenario{
		Name:  "client-disconnect",
		Title: "A client that goes away mid-request",
		Explain: Explanation{
			Shows: "Ada's phone loses its signal in the middle of four transfers, each time at another point " +
				"of the server's work: before the key is claimed, while the claim's answer is on its way back " +
				"from PostgreSQL, just after the claim, and inside the transaction. Each time her app retries " +
				"with the same key.",
			Breaks: "A server that runs the claim on the request's own context hears \"context canceled\" when " +
				"the client goes away — even when PostgreSQL has already committed the claim. It returns " +
				"without releasing the key, and the key stays in progress with nobody working on it: every " +
				"retry is told 409 until the lock expires.",
			Defence: "Once a key may be claimed, run the request's database work on a context of its own, " +
				"detached from the client and bounded by a work timeout below the lock's 30 s. The work then " +
				"finishes (the retry gets the replay) or rolls back and releases the key.",
			SQL: "-- the release after an unexpected failure, the holder's own claim only:\n" +
				"DELETE FROM idempotency_keys WHERE user_id = $1 AND key = $2 AND lock_id = $3;",
		},
		Summary: "the client goes away mid-request at four points; a claim made on the request's context stays in progress with nobody working on it",
		Phases: []Phase{{
			Title:   "without protection: the claim and the transfer run on the request's context",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, true, false)
			},
		}, {
			Title: "with protection: once the key may be claimed, the work runs on a context of its own, and finishes or releases",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, false, true)
			},
		}},
	})
}

// keysInProgress lists the keys still in progress, as user/key.
func keysInProgress(ctx context.Context, r *Run) ([]string, error) {
	rows, err := r.DB.Query(ctx, "SELECT 'user ' || user_id::text || ', key ' || key FROM idempotency_keys WHERE status = 'in_progress' ORDER BY 1")
	if err != nil {
		return nil, fmt.Errorf("read keys in progress: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
