package scenarios

import (
	"context"
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// Everything a careless or hostile client can send to POST /transfers, and
// the one answer each must get: problem details with a code, and not a kobo
// moved nor a row written.
func init() {
	Register(Scenario{
		Name:    "http-misuse",
		Title:   "What a careless client can send",
		Summary: "no token 401, someone else's account 404, no key 400, malformed bodies 400/413/415: all problem+json, nothing written",
		Explain: Explanation{
			Shows: "Everything a careless or hostile client can send to POST /transfers — no token, a made-up " +
				"token, no key, a short key, the wrong content type, a body too large, bodies that are not " +
				"JSON or not the transfer's JSON — and Bola reaching for Ada's account.",
			Breaks: "This story has no unprotected run: it pins the API's refusals. Each request must get one " +
				"clear answer with a machine-readable code, and none may write a row — not a transfer, not " +
				"even a key.",
			Defence: "Refuse everything that can be refused before the database: authenticate from the token " +
				"only, require the key, decode the body strictly (unknown members, duplicates, trailing data, " +
				"floats and strings for numbers are 400), limit its size (413) and type (415). Answer with " +
				"problem details (RFC 9457) and a code. Someone else's account is 404, like a missing one.",
			SQL: "-- nothing: a refused request never reaches the database",
		},
		Phases: []Phase{{
			Title: "the API refuses each with problem details and writes nothing",
			Run: func(ctx context.Context, r *Run) error {
				url, err := r.HTTPServer(r.Handler(nil), "the server")
				if err != nil {
					return err
				}
				good := `{"from":1,"to":2,"amountKobo":1000000}`
				cases := []struct {
					what, token, key, ctype, body string
					status                        int
					code                          string
				}{
					{"no token", "", "k", "", good, 401, api.CodeUnauthorized},
					{"a made-up token", "token-mallory", "k", "", good, 401, api.CodeUnauthorized},
					{"no Idempotency-Key", "token-ada", "-", "", good, 400, idem.CodeKeyRequired},
					{"a key of 3 characters", "token-ada", "abc", "", good, 400, idem.CodeKeyRequired},
					{"Content-Type text/plain", "token-ada", "k", "text/plain", good, 415, api.CodeUnsupportedMedia},
					{"a body of 2 KiB", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":1000000,"pad":"` + strings.Repeat("x", 2048) + `"}`, 413, api.CodeBodyTooLarge},
					{"not JSON", "token-ada", "k", "", `from=1&to=2`, 400, bank.CodeInvalidRequest},
					{"an unknown member (userId)", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":100,"userId":2}`, 400, bank.CodeInvalidRequest},
					{"a member twice", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":1,"amountKobo":9000000}`, 400, bank.CodeInvalidRequest},
					{"trailing data", "token-ada", "k", "", good + `{"from":1}`, 400, bank.CodeInvalidRequest},
					{"the amount as a string", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":"1000000"}`, 400, bank.CodeInvalidAmount},
					{"a float amount", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":10.5}`, 400, bank.CodeInvalidAmount},
					{"a negative amount", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":-1000000}`, 400, bank.CodeInvalidAmount},
					{"an overflowing amount", "token-ada", "k", "", `{"from":1,"to":2,"amountKobo":9223372036854775808}`, 400, bank.CodeInvalidAmount},
					{"the account as a string", "token-ada", "k", "", `{"from":"1","to":2,"amountKobo":100}`, 400, bank.CodeInvalidAccount},
					{"no amount", "token-ada", "k", "", `{"from":1,"to":2}`, 400, bank.CodeInvalidAmount},
				}
				r.Step("every request below carries a fresh valid key unless it says otherwise")
				for i, c := range cases {
					h := map[string]string{"Content-Type": "application/json", api.HeaderIntent: fmt.Sprintf("misuse-%d", i+1)}
					if c.token != "" {
						h["Authorization"] = "Bearer " + c.token
					}
					switch c.key {
					case "k":
						h[api.HeaderKey] = r.Key()
					case "-":
					default:
						h[api.HeaderKey] = c.key
					}
					if c.ctype != "" {
						h["Content-Type"] = c.ctype
					}
					check(ctx, r, "POST", url+"/transfers", h, c.body, c.what, c.status, c.code)
				}
				var keys, transfers int
				_ = r.DB.QueryRow(ctx, "SELECT (SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM transfers)").Scan(&keys, &transfers)
				r.Expect(keys == 0 && transfers == 0, "none of them wrote a row (keys %d, transfers %d)", keys, transfers)

				r.Step("Bola, signed in, tries Ada's account")
				bola := map[string]string{"Authorization": "Bearer token-bola", "Content-Type": "application/json",
					api.HeaderKey: r.Key(), api.HeaderIntent: "bola-takes-from-ada"}
				check(ctx, r, "POST", url+"/transfers", bola, `{"from":1,"to":2,"amountKobo":1000000}`,
					"POST from Ada's account as Bola", 404, bank.CodeAccountNotFound)
				check(ctx, r, "GET", url+"/accounts/1", bola, "", "GET Ada's account as Bola", 404, bank.CodeAccountNotFound)
				check(ctx, r, "GET", url+"/accounts/99", bola, "", "GET an account that does not exist", 404, bank.CodeAccountNotFound)
				r.ExpectBalances(ctx, 5_000_000, 500_000, 2_000_000)
				r.ExpectTransfers(ctx, 0)
				return nil
			},
		}},
	})
}

// check sends one request and expects its status and problem code, as
// application/problem+json; the answer is recorded as what the client was told.
func check(ctx context.Context, r *Run, method, url string, h map[string]string, body, what string, status int, code string) {
	got, p, ctype, err := httpStatus(ctx, method, url, h, body)
	if err != nil {
		r.Expect(false, "%s: %d %s (got a network error: %v)", what, status, code, err)
		return
	}
	r.emit(Event{Kind: KindAttempt, Text: fmt.Sprintf("%-34s → %d %s", what, got, p.Code)})
	if method == "POST" {
		r.Told(bank.Told{Intent: h[api.HeaderIntent], Response: p.Response()})
	}
	r.Expect(got == status && p.Code == code && ctype == api.ProblemType, "%s: %d %s as problem+json", what, status, code)
}
