package scenarios

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/api/client"
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
		in := c.NewIntent(AdaPaysBola)
		in.Label = "ada-pays-bola"
		r.Step("three servers share one database; Ada's app sends ₦10,000 with key %s, round-robin", in.Key)
		out, err := r.SendHTTP(ctx, c, in, 1)
		if err == nil {
			r.Expect(len(out.Attempts) == 2 && out.Attempts[0].URL != out.Attempts[1].URL,
				"the retry lands on another server (%s)", fmt.Sprint(attemptServers(r, out)))
		}
		return out, err
	}

	Register(Scenario{
		Name:    "three-servers",
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
				r.Expect(out.Kind == client.OK && out.Response.Status == 201 && !out.Response.Replayed,
					"the other server has never seen the key: a new 201, not a replay")
				r.ExpectBalances(ctx, 3_000_000, 2_500_000, 2_000_000)
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
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
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
