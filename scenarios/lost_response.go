package scenarios

import (
	"bytes"
	"context"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Ada taps Send on a bus; the server moves the money; the response is lost
// in a tunnel; the app retries.
func init() {
	Register(Scenario{
		Name:    "lost-response",
		Title:   "The response that never arrives",
		Lesson:  "The response that never arrives; The lost response, again",
		Order:   OrderLostResponse,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "the response to a ₦10,000 transfer is lost and the app retries: without a key ₦20,000 moves; with one the retry is replayed",
		Explain: Explanation{
			Shows: "Ada taps Send on a bus. The server moves ₦10,000 and answers, but the answer dies in a " +
				"tunnel. After a timeout her app does what a good app does and tries again.",
			Breaks: "A timeout tells the app nothing: the request may never have arrived, may have failed, " +
				"or may have succeeded. The retry is a perfectly valid transfer request, so the server " +
				"moves ₦10,000 a second time: one tap, ₦20,000.",
			Defence: "The app makes one idempotency key for the intent, before the first attempt, and sends " +
				"it with every retry. The server stores the key with its answer in the same transaction " +
				"as the transfer; when the key comes back it replays that answer — same transferId — " +
				"instead of transferring again.",
			SQL: "-- in the transfer's own transaction, after the transfer:\n" +
				"UPDATE idempotency_keys\n" +
				"   SET status = 'completed', response_status = $4, response_body = $5,\n" +
				"       lock_id = NULL, locked_until = NULL\n" +
				" WHERE user_id = $1 AND key = $2 AND lock_id = $3;\n" +
				"-- a retry's claim finds the key completed and replays its answer",
		},
		Phases: []Phase{{
			Title:   "without protection: a transaction, but no idempotency key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.NoKey = true
				net := r.Network(h, nil).On(&faults.LoseResponse{}, 1)
				a := r.Amount()
				r.Step("Ada sends %s to Bola; the first response is lost", bank.Naira(a))
				resp, err := r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
				r.Lesson().Expect(err == nil && resp.Status == 201 && !resp.Replayed, "the retry is a new 201, not a replay")
				r.Lesson().ExpectBalances(ctx, 5_000_000-2*a, 500_000+2*a, 2_000_000)
				r.Lesson().ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: one idempotency key for the intent, stored in PostgreSQL",
			Run: func(ctx context.Context, r *Run) error {
				net := r.Network(r.Handler(nil), nil).On(&faults.LoseResponse{}, 1)
				// What the server sent, including the answer the tunnel ate.
				var sent [][]byte
				handle := net.Server
				net.Server = func(ctx context.Context, req idem.Request) (bank.Response, error) {
					resp, err := handle(ctx, req)
					sent = append(sent, resp.Body)
					return resp, err
				}
				in := r.AdaTap("ada-pays-bola")
				r.Step("Ada's app makes key %s once, before the first attempt", in.Key)
				resp, err := r.SendWithRetries(ctx, net, in, 3)
				rc, _ := resp.Receipt()
				r.Lesson().Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is answered 201, replayed")
				r.Lesson().Expect(rc.TransferID == firstTransferID(ctx, r), "the replay carries the original transferId (%d)", rc.TransferID)
				r.Expect(len(sent) > 0 && bytes.Equal(resp.Body, sent[0]),
					"the replay is the lost answer byte for byte (%d bytes, %d sent)", len(resp.Body), firstLen(sent))
				r.Lesson().ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.Lesson().ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}

func firstTransferID(ctx context.Context, r *Run) int64 {
	var id int64
	if err := r.DB.QueryRow(ctx, "SELECT coalesce(min(id), -1) FROM transfers").Scan(&id); err != nil {
		return -1
	}
	return id
}

func firstLen(sent [][]byte) int {
	if len(sent) == 0 {
		return 0
	}
	return len(sent[0])
}
