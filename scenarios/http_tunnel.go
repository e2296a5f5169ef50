package scenarios

import (
	"context"

	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// The lesson's last step, on real sockets: the transfer behind an HTTP
// server, a client that retries with the same key, and a proxy in between
// that drops the connection after the server has committed.
func init() {
	story := func(ctx context.Context, r *Run, h *idem.Handler) (client.Outcome, error) {
		url, err := r.HTTPServer(h, "the server")
		if err != nil {
			return client.Outcome{}, err
		}
		proxy, err := r.Proxy(url, "the server")
		if err != nil {
			return client.Outcome{}, err
		}
		proxy.On(&faults.Tunnel{}, 1)
		c := r.Client(1, proxy.URL())
		in := c.NewIntent(AdaPaysBola)
		in.Label = "ada-pays-bola"
		r.Step("Ada's app makes key %s, then POSTs ₦10,000 to Bola; the bus enters a tunnel", in.Key)
		return r.SendHTTP(ctx, c, in, 1)
	}

	Register(Scenario{
		Name:    "http-tunnel",
		Summary: "over real HTTP: the connection drops after the commit and the client retries; without a key ₦20,000 moves",
		Phases: []Phase{{
			Title:   "without protection: a transaction per request, but the server ignores the key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.NoKey = true
				out, err := story(ctx, r, h)
				if err != nil {
					return err
				}
				r.Expect(len(out.Attempts) == 2 && out.Attempts[0].Err != nil, "attempt 1 is a network error")
				r.Expect(out.Kind == client.OK && out.Response.Status == 201 && !out.Response.Replayed, "attempt 2 is a new 201, not a replay")
				r.ExpectBalances(ctx, 3_000_000, 2_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: one key per intent, stored in PostgreSQL with the transfer",
			Run: func(ctx context.Context, r *Run) error {
				out, err := story(ctx, r, r.Handler(nil))
				if err != nil {
					return err
				}
				rc, _ := out.Response.Receipt()
				r.Expect(len(out.Attempts) == 2 && out.Attempts[0].Err != nil, "attempt 1 is a network error")
				r.Expect(out.Kind == client.OK && out.Response.Status == 201 && out.Response.Replayed, "attempt 2 is 201, replayed")
				r.Step("app shows: %s", out.Response.Body)
				r.Expect(rc == bank.Receipt{TransferID: firstTransferID(ctx, r), From: 1, To: 2, AmountKobo: 1_000_000, BalanceKobo: 4_000_000},
					"the app shows the original body (transfer %d, balance %s)", rc.TransferID, bank.Naira(rc.BalanceKobo))
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}
