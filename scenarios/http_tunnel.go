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
		in := c.NewIntent(bank.TransferRequest{From: 1, To: 2, AmountKobo: r.Amount()})
		in.Label = "ada-pays-bola"
		r.Step("Ada's app makes key %s, then POSTs %s to Bola; the bus enters a tunnel", in.Key, bank.Naira(r.Amount()))
		return r.SendHTTP(ctx, c, in, 1)
	}

	Register(Scenario{
		Name:    "http-tunnel",
		Title:   "Over HTTP, with a retrying client",
		Lesson:  "Over HTTP, with a retrying client",
		Order:   OrderHTTP,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "over real HTTP: the connection drops after the commit; attempt 2 is a 201, replayed (without a key ₦20,000 moves)",
		Explain: Explanation{
			Shows: "The lesson's last step on real sockets: the transfer API behind an HTTP server on " +
				"127.0.0.1, the retrying client, and a proxy between them that drops the connection after " +
				"the server has committed — the tunnel, in TCP.",
			Breaks: "The client sees a network error and cannot know the transfer happened. If the server " +
				"ignores the key, the retry is a second transfer: ₦20,000.",
			Defence: "The client makes the key once per intent, outside its retry loop, and retries only " +
				"what may succeed later (a network error, 409, 429, 5xx) with backoff and jitter. The server " +
				"replays the stored answer with Idempotent-Replayed: true, so the app shows the original " +
				"transfer, same id, same balance.",
			SQL: "-- the server's side is lost-response's: the key's answer commits with\n" +
				"-- the transfer, and a retry reads it:\n" +
				"SELECT status, response_status, response_body\n" +
				"  FROM idempotency_keys WHERE user_id = $1 AND key = $2;",
		},
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
				a := r.Amount()
				r.Expect(len(out.Attempts) == 2 && out.Attempts[0].Err != nil, "attempt 1 is a network error")
				r.Expect(out.Kind == client.OK && out.Response.Status == 201 && !out.Response.Replayed, "attempt 2 is a new 201, not a replay")
				r.ExpectBalances(ctx, 5_000_000-2*a, 500_000+2*a, 2_000_000)
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
				a := r.Amount()
				lesson := r.Lesson()
				lesson.Expect(len(out.Attempts) == 2 && out.Attempts[0].Err != nil, "attempt 1 is a network error")
				lesson.Expect(out.Kind == client.OK && out.Response.Status == 201 && out.Response.Replayed, "attempt 2 is 201, replayed")
				r.Step("app shows: %s", out.Response.Body)
				jsonbOrder(ctx, r, out.Response.Body)
				lesson.Expect(rc == bank.Receipt{TransferID: firstTransferID(ctx, r), From: 1, To: 2, AmountKobo: a, BalanceKobo: 5_000_000 - a},
					"the app shows the original body (transfer %d, balance %s)", rc.TransferID, bank.Naira(rc.BalanceKobo))
				lesson.ExpectBalances(ctx, 5_000_000-a, 500_000+a, 2_000_000)
				lesson.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}

// jsonbOrder tells what the lesson's server.js shows at this point and why
// bank-sim's replay differs: the lesson stores the answer as jsonb, which
// keeps an object's members in its own order (shorter names first), so its
// replay prints "to" before "from". bank-sim stores the answer as text (see
// bank.Schema), so its replay is the first answer byte for byte. The jsonb
// form comes from PostgreSQL itself, not from a copy of jsonb's rule.
func jsonbOrder(ctx context.Context, r *Run, body []byte) {
	var stored string
	if err := r.DB.QueryRow(ctx, "SELECT $1::jsonb::text", string(body)).Scan(&stored); err != nil || len(body) == 0 {
		return
	}
	if stored == string(body) {
		// --bug jsonb-replay: the replay already is jsonb's.
		r.Step("that is the answer as a jsonb column gives it back, as in the lesson's server.js: " +
			"jsonb keeps an object's members in its own order (shorter names first), not in the order the server wrote them")
		return
	}
	r.Step("the lesson's server.js shows %s here, \"to\" before \"from\": it stores the answer as jsonb, "+
		"which keeps an object's members in its own order (shorter names first). bank-sim stores it as text, "+
		"so its replay is the first answer byte for byte, as a client that compares or checks a signature needs "+
		"(--bug jsonb-replay stores it as the lesson does)", stored)
}
