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
		Summary: "the response to a ₦10,000 transfer is lost and the app retries: without a key ₦20,000 moves",
		Phases: []Phase{{
			Title:   "without protection: a transaction, but no idempotency key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.NoKey = true
				net := r.Network(h, nil).On(&faults.LoseResponse{}, 1)
				r.Step("Ada sends ₦10,000 to Bola; the first response is lost")
				resp, err := r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
				r.Expect(err == nil && resp.Status == 201 && !resp.Replayed, "the retry is a new 201, not a replay")
				r.ExpectBalances(ctx, 3_000_000, 2_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 2)
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
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is answered 201, replayed")
				r.Expect(rc.TransferID == firstTransferID(ctx, r), "the replay carries the original transferId (%d)", rc.TransferID)
				r.Expect(len(sent) > 0 && bytes.Equal(resp.Body, sent[0]),
					"the replay is the lost answer byte for byte (%d bytes, %d sent)", len(resp.Body), firstLen(sent))
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
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
