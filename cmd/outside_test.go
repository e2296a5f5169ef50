package cmd_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
)

// hostileTarget is a target whose every answer carries text, for the
// tests that outside text is shown escaped: a transfer "t-"+text told to
// every intent (201), a key's second request refused with text as its
// code and error (422), anything else refused with text as its error.
// With raw, that last error is written as it came, not as JSON: a hostile
// server need not write JSON.
func hostileTarget(t *testing.T, text string, raw bool) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		again := seen[key]
		seen[key] = true
		mu.Unlock()
		switch {
		case r.Method == "POST" && again:
			w.WriteHeader(422)
			answerRaw(w, map[string]string{"code": text, "error": text})
		case r.Method == "POST" && strings.Contains(r.URL.Path, "transfers"):
			w.WriteHeader(201)
			answerRaw(w, map[string]string{"transferId": "t-" + text})
		case raw:
			w.WriteHeader(422)
			w.Write([]byte(`{"error":"` + text + `"}`))
		default:
			w.WriteHeader(422)
			answerRaw(w, map[string]string{"error": text})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hostileHistory is a history file whose strings (an account holder's
// name, an intent's label, its key, an attempt's error) carry text, and
// whose one attempt was answered body; it moved money for a refused
// intent, so check fails it.
func hostileHistory(text, body string) chaos.History {
	opening := []bank.Account{{ID: 1, OwnerID: 1, Holder: "Ada " + text, Status: "active", BalanceKobo: 1_000}, {ID: 2, OwnerID: 2, Holder: "Bola", Status: "active", BalanceKobo: 1_000}}
	return chaos.History{
		Seed:    1,
		Opening: opening,
		Intents: []chaos.Intent{{Label: "intent-0 " + text, UserID: 1, Key: "k " + text, Outcome: chaos.SeenRejected,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100},
			Attempts: []chaos.Attempt{{N: 1, Phase: chaos.PhaseFault, Key: "k " + text, StartNs: 1, EndNs: 2, Status: 422,
				Body: chaos.Bytes(body), Error: text, Seen: chaos.SeenRejected}}}},
		Final: bank.Ledger{Accounts: opening, Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 100, Intent: "intent-0 " + text}}},
		Fired: map[string]int{}, Server: map[string]int{}, Duration: 10,
	}
}

// answerRaw writes v as JSON with its markup as it is (not \u003c), as a
// server need not escape it.
func answerRaw(w http.ResponseWriter, v any) {
	e := json.NewEncoder(w)
	e.SetEscapeHTML(false)
	e.Encode(v)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
