package scenarios

import (
	"context"
	"strings"

	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Three copies of the server on one database behind a round-robin client:
// the retry lands on another copy. Keys kept in each copy's memory (the
// lesson's "keys in a Map") do not follow it there; keys in PostgreSQL do.
func init() {
	story := func(ctx context.Context, r *Run, handler func() *idem.Handler) (client.Outcome, error) {
		var urls []string
		for _, name := range []string{"server A", "server B", "server C"} {
			url, err := r.HTTPServer(handler(), name)
			if err != nil {
				return client.Outcome{}, err
			}
			// Each server's traffic passes a proxy that loses the first
			// attempt's answer after the commit, wherever it lands.
			proxy, err := r.Proxy(url, name)
			if err != nil {
				return client.Outcome{}, err
			}
			proxy.On(&faults.Tunnel{}, 1)
			urls = append(urls, proxy.URL())
		}
		c := r.Client(1, urls...)
		in := c.NewIntent(bank.TransferRequest{From: 1, To: 2, AmountKobo: r.Amount()})
		in.Label = "ada-pays-bola"
		r.Step("three servers share one database; Ada's app sends %s with key %s, round-robin", bank.Naira(r.Amount()), in.Key)
		out, err := r.SendHTTP(ctx, c, in, 1)
		if err == nil {
			r.Lesson().Expect(len(out.Attempts) == 2 && out.Attempts[0].URL != out.Attempts[1].URL,
				"the retry lands on another server (%s)", strings.Join(attemptServers(r, out), ", then "))
		}
		return out, err
	}

	Register(Scenario{
		Name:   "three-servers",
		Title:  "Keys in a map in memory",
		Lesson: "Failure cases: keys in a Map in memory",
		Order:  OrderFailureCases + 10,
		Amount: AdaPaysBola.AmountKobo,
		Explain: Explanation{
			Shows: "Three copies of the server on one database behind a round-robin client, as behind a " +
				"load balancer. The first answer is lost after the commit, and the retry lands on another " +
				"copy.",
			Breaks: "Keys kept in a map in each server's memory do not follow the retry: the other copy has " +
				"never seen the key, takes the request for a new one and transfers again. (A restart loses " +
				"the map the same way.)",
			Defence: "Keep the keys where every copy of the server finds them and where they survive a " +
				"restart: in the database, next to the money, written in the same transactions.",
			SQL: "CREATE TABLE idempotency_keys (\n" +
				"  user_id integer, key text, request_hash text, status text,\n" +
				"  lock_id text, locked_until timestamptz,\n" +
				"  response_status integer, response_body text, created_at timestamptz,\n" +
				"  PRIMARY KEY (user_id, key));",
		},
		Summary: "three servers on one database; the retry lands on another one: keys in each server's memory move ₦20,000",
		Phases: []Phase{{
			Title:   "without protection: each server keeps its keys in a map in memory",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				out, err := story(ctx, r, func() *idem.Handler {
					h := r.Handler(nil)
					h.Memory = &idem.MemoryStore{} // one map per server process
					return h
				})
				if err != nil {
					return err
				}
				r.Lesson().Expect(out.Kind == client.OK && out.Response.Status == 201 && !out.Response.Replayed,
					"the other server has never seen the key: a new 201, not a replay")
				r.ExpectBalances(ctx, 5_000_000-2*r.Amount(), 500_000+2*r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: the keys live in PostgreSQL, which all three servers share",
			Run: func(ctx context.Context, r *Run) error {
				out, err := story(ctx, r, func() *idem.Handler { return r.Handler(nil) })
				if err != nil {
					return err
				}
				r.Expect(out.Kind == client.OK && out.Response.Status == 201 && out.Response.Replayed,
					"the other server finds the key: 201, replayed")
				r.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}

func attemptServers(r *Run, out client.Outcome) []string {
	var s []string
	for _, a := range out.Attempts {
		s = append(s, r.urlName(a.URL))
	}
	return s
}
