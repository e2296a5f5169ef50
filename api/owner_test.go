package api_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// transferOf posts a transfer that must be created and returns its id.
func transferOf(t *testing.T, url, token, key, body string) int64 {
	t.Helper()
	a := do(t, "POST", url+"/transfers", post(token, key), body)
	var rc bank.Receipt
	if err := json.Unmarshal([]byte(a.body), &rc); a.status != 201 || err != nil || rc.TransferID == 0 {
		t.Fatalf("POST %s as %s: %d %s", body, token, a.status, a.body)
	}
	return rc.TransferID
}

// Issue 19: every read endpoint shows a user only what is theirs, on a bank
// where that cannot hold by coincidence (pgtest.MixedAccounts: account 2 is
// user 4's, users own two accounts each). A check that compares the account's
// id, or the sender's account id, with the user's id, or joins on the
// recipient, or looks a key up without its user, lets some user below read
// what is not theirs, or hides their own.
func TestReadEndpointsShowOnlyTheOwnersOwn(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, 4)
	tokens := map[int64]string{}
	for tok, user := range testTokens() {
		tokens[user] = tok
	}
	// Ada pays from her second account; Dayo (user 4) from account 2; both
	// under the same key text, which each user holds for themselves.
	const key = "owner-key-0000000001"
	ada := transferOf(t, srv.URL, "token-ada", key, `{"from":12,"to":21,"amountKobo":10000}`)
	dayo := transferOf(t, srv.URL, "token-dayo", key, `{"from":2,"to":21,"amountKobo":1000}`)

	t.Run("GET /accounts/{id}", func(t *testing.T) {
		for _, acct := range pgtest.MixedAccounts {
			for user, tok := range tokens {
				a := do(t, "GET", fmt.Sprintf("%s/accounts/%d", srv.URL, acct.ID), post(tok, ""), "")
				var got bank.Account
				_ = json.Unmarshal([]byte(a.body), &got)
				switch {
				case acct.OwnerID == user && (a.status != 200 || got.ID != acct.ID || got.OwnerID != user):
					t.Errorf("user %d on their own account %d (%s): %d %s, want 200 and the account", user, acct.ID, acct.Status, a.status, a.body)
				case acct.OwnerID != user && (a.status != 404 || a.problem.Code != bank.CodeAccountNotFound):
					t.Errorf("user %d on user %d's account %d: %d %s, want 404 %s", user, acct.OwnerID, acct.ID, a.status, a.body, bank.CodeAccountNotFound)
				}
			}
		}
	})
	t.Run("GET /transfers/{id}", func(t *testing.T) {
		// A transfer is its sender's: the recipient's owner (Bola) does not
		// see it, nor does user 2 see the transfer from account 2.
		owner := map[int64]int64{ada: 1, dayo: 4}
		for id, sender := range owner {
			for user, tok := range tokens {
				a := do(t, "GET", fmt.Sprintf("%s/transfers/%d", srv.URL, id), post(tok, ""), "")
				switch {
				case user == sender && a.status != 200:
					t.Errorf("user %d on their own transfer %d: %d %s, want 200", user, id, a.status, a.body)
				case user != sender && (a.status != 404 || a.problem.Code != api.CodeNotFound):
					t.Errorf("user %d on user %d's transfer %d: %d %s, want 404 %s", user, sender, id, a.status, a.body, api.CodeNotFound)
				}
			}
		}
	})
	t.Run("GET /transfers?key=", func(t *testing.T) {
		want := map[int64]int64{1: ada, 4: dayo}
		for user, tok := range tokens {
			a := do(t, "GET", srv.URL+"/transfers?key="+key, post(tok, ""), "")
			var rc bank.Receipt
			_ = json.Unmarshal([]byte(a.body), &rc)
			switch id, sent := want[user]; {
			case sent && (a.status != 201 || rc.TransferID != id):
				t.Errorf("user %d on their own key: %d %s, want 201 transfer %d", user, a.status, a.body, id)
			case !sent && (a.status != 404 || a.problem.Code != api.CodeUnknownKey):
				t.Errorf("user %d on another user's key: %d %s, want 404 %s", user, a.status, a.body, api.CodeUnknownKey)
			}
		}
	})
}

// Issue 19: every stored answer, a 201 and each refusal, is replayed with
// the replay marker and the first answer's status, type and bytes, both by
// POST with the same key and by GET /transfers?key=; the first answer has no
// marker. A server that marks only its replayed 201s, or builds a refusal's
// problem anew, fails here.
func TestEveryReplayCarriesTheMarkerAndTheFirstBytes(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, 4)
	cases := []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"created", "token-ada", `{"from":11,"to":21,"amountKobo":1000000}`, 201, ""},
		{"insufficient funds", "token-bola", `{"from":21,"to":11,"amountKobo":9000000}`, 422, bank.CodeInsufficientFunds},
		{"another user's account", "token-ada", `{"from":21,"to":11,"amountKobo":100}`, 404, bank.CodeAccountNotFound},
		{"a closed sender", "token-bola", `{"from":22,"to":11,"amountKobo":100}`, 422, bank.CodeAccountNotActive},
		{"a frozen sender", "token-chidi", `{"from":31,"to":11,"amountKobo":100}`, 422, bank.CodeAccountNotActive},
		{"a frozen recipient", "token-ada", `{"from":11,"to":31,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"a missing recipient", "token-ada", `{"from":11,"to":99,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"the same account", "token-ada", `{"from":12,"to":12,"amountKobo":100}`, 422, bank.CodeSameAccount},
	}
	for i, c := range cases {
		key := fmt.Sprintf("replay-marker-%06d", i)
		first := do(t, "POST", srv.URL+"/transfers", post(c.token, key), c.body)
		if first.status != c.status || first.problem.Code != c.code || first.header.Get(api.HeaderReplayed) != "" {
			t.Errorf("%s: first answer %d %q (marker %q), want %d %q without the marker: %s",
				c.name, first.status, first.problem.Code, first.header.Get(api.HeaderReplayed), c.status, c.code, first.body)
			continue
		}
		for _, again := range []struct {
			how                   string
			method, path, payload string
		}{
			{"POST again", "POST", "/transfers", c.body},
			{"GET /transfers?key=", "GET", "/transfers?key=" + key, ""},
		} {
			h := post(c.token, key)
			if again.method == "GET" {
				h = post(c.token, "")
			}
			a := do(t, again.method, srv.URL+again.path, h, again.payload)
			if a.header.Get(api.HeaderReplayed) != "true" || a.status != first.status || a.body != first.body ||
				a.header.Get("Content-Type") != first.header.Get("Content-Type") {
				t.Errorf("%s, %s: %d %s %q (marker %q), want %d %s %q with %s: true",
					c.name, again.how, a.status, a.header.Get("Content-Type"), a.body, a.header.Get(api.HeaderReplayed),
					first.status, first.header.Get("Content-Type"), first.body, api.HeaderReplayed)
			}
		}
	}
}
