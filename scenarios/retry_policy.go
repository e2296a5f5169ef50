package scenarios

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Which answers the client retries, and how long it waits: the lesson's
// exercise "Which responses to retry?", then the rules at work on real
// sockets, including giving up honestly.
func init() {
	Register(Scenario{
		Name:   "retry-policy",
		Title:  "Which responses to retry?",
		Lesson: "Over HTTP: the client's rules; Practice: which responses to retry?",
		Order:  OrderHTTP + 10,
		Explain: Explanation{
			Shows: "The client's half of the bargain: what it retries, how long it waits, when it gives up " +
				"and what it then tells its user — first with a client that makes a new key for every " +
				"attempt, then with the lesson's rules, on real sockets.",
			Breaks: "A new key per attempt makes every retry look new to the server: a lost answer becomes a " +
				"second transfer, exactly as with no keys at all.",
			Defence: "One key per intent, made before the first attempt. Retry only what may succeed later — " +
				"no answer, 409, 429, 5xx — never a 2xx, 400 or 422. Back off (50, 100, 200 ms …) with " +
				"jitter; bank-sim's client also honours Retry-After. After the last attempt the outcome is " +
				"unknown, not failed: show it as pending and resolve it with GET /transfers?key=.",
			SQL: "-- the client's rules need no SQL; GET /transfers?key= reads the key:\n" +
				"SELECT status, response_status, response_body\n" +
				"  FROM idempotency_keys WHERE user_id = $1 AND key = $2;",
		},
		Summary: "what the client retries (network, 409, 429, 5xx) and its backoff; a new key per attempt moves ₦20,000",
		Phases: []Phase{{
			Title:   "without protection: the client makes a new key for every attempt",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				url, err := r.HTTPServer(r.Handler(nil), "the server")
				if err != nil {
					return err
				}
				proxy, err := r.Proxy(url, "the server")
				if err != nil {
					return err
				}
				proxy.On(&faults.Tunnel{}, 1)
				c := r.Client(1, proxy.URL())
				c.Flaws.NewKeyPerAttempt = true
				in := c.NewIntent(AdaPaysBola)
				in.Label = "ada-pays-bola"
				r.Step("Ada sends ₦10,000; the first answer is lost; the retry carries a new key")
				out, err := r.SendHTTP(ctx, c, in, 1)
				if err != nil {
					return err
				}
				r.Lesson().Expect(len(out.Attempts) == 2 && out.Attempts[0].Key != out.Attempts[1].Key, "the two attempts carry different keys")
				r.Lesson().Expect(out.Response.Status == 201 && !out.Response.Replayed, "every retry looks new: a new 201, not a replay")
				r.ExpectBalances(ctx, 3_000_000, 2_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: one key per intent; retry only what may succeed later; back off; give up honestly",
			Run: func(ctx context.Context, r *Run) error {
				r.Step("should the client retry?")
				want := map[string]bool{"network": true, "201": false, "400": false, "409": true, "422": false, "429": true, "500": true, "503": true}
				var table []string
				ok := true
				for _, outcome := range []string{"network", "201", "400", "409", "422", "429", "500", "503"} {
					status, _ := strconv.Atoi(outcome) // "network" is status 0: no answer
					got := client.ShouldRetry(status)
					ok = ok && got == want[outcome]
					table = append(table, outcome+" "+strconv.FormatBool(got))
				}
				r.Step("%s", strings.Join(table, ", "))
				r.Lesson().Expect(ok, "the client's answers match the lesson's table")

				h := r.Handler(nil)
				url, err := r.HTTPServer(h, "the server")
				if err != nil {
					return err
				}
				proxy, err := r.Proxy(url, "the server")
				if err != nil {
					return err
				}
				proxy.On(&faults.Reset{}, 1).On(&faults.Unavailable{RetryAfter: 1}, 2)
				c := r.Client(1, proxy.URL())
				in := c.NewIntent(AdaPaysBola)
				in.Label = "ada-pays-bola"
				r.Step("Ada sends ₦10,000: attempt 1 is reset, attempt 2 meets a 503 with Retry-After: 1")
				out, err := r.SendHTTP(ctx, c, in, 1)
				if err != nil {
					return err
				}
				r.Expect(out.Kind == client.OK && len(out.Attempts) == 3 && !out.Response.Replayed, "attempt 3 is 201, the first to reach the server")
				if len(out.Attempts) == 3 {
					w1, w2 := out.Attempts[0].Wait, out.Attempts[1].Wait
					r.Lesson().Expect(w1 >= 50*time.Millisecond && w1 < 100*time.Millisecond, "after attempt 1 it waited 50 ms plus jitter under 50 ms (%s)", Dur(w1))
					// The lesson's client ignores Retry-After; bank-sim's honours it.
					r.Expect(w2 == time.Second, "after attempt 2 it honoured Retry-After: 1 s, longer than its 100–150 ms backoff (%s)", Dur(w2))
				}

				r.Step("Bola sends ₦90,000, more than he has (straight to the server)")
				bola := r.Client(2, url)
				tooMuch := bola.NewIntent(bank.TransferRequest{From: 2, To: 1, AmountKobo: 9_000_000})
				tooMuch.Label = "bola-too-much"
				out, err = r.SendHTTP(ctx, bola, tooMuch, 2)
				if err != nil {
					return err
				}
				r.Lesson().Expect(out.Kind == client.Rejected && len(out.Attempts) == 1 && out.Response.Code() == bank.CodeInsufficientFunds,
					"422 insufficient_funds is final: one attempt, no retry")

				r.Step("Ada sends ₦1,000 while another server still holds its key (its lock has 30 s left)")
				c = r.Client(1, url)
				stuck := c.NewIntent(bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000})
				stuck.Label = "ada-stuck"
				if _, err := h.Store.Begin(ctx, r.DB, 1, stuck.Key, idem.Fingerprint(idem.Method, idem.Path, stuck.Transfer.Body()), time.Now()); err != nil {
					return err
				}
				out, err = r.SendHTTP(ctx, c, stuck, 1)
				if err != nil {
					return err
				}
				r.Lesson().Expect(out.Kind == client.Unknown && len(out.Attempts) == client.DefaultAttempts,
					"after %d answers of 409 the outcome is unknown (pending), not failed", client.DefaultAttempts)
				resp, found, err := c.Resolve(ctx, stuck.Key)
				r.Expect(err == nil && found && resp.Status == 409, "GET /transfers?key= says it is still in progress (%s)", Describe(resp))

				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}
