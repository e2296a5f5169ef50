package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/idem"
)

// A replay is the first answer byte for byte; with ReencodedReplays (the
// HTTP layer's mistake that only a run over HTTP can show) it carries the
// same members in another order: the same JSON, other bytes, which chaos
// over HTTP calls replay-differs.
func TestReencodedReplaysAreOtherBytes(t *testing.T) {
	t.Parallel()
	for _, flaws := range []api.Flaws{{}, {ReencodedReplays: true}} {
		pool := newBank(t, 4)
		srv := httptest.NewServer(api.NewServer(api.Config{Handler: &idem.Handler{DB: pool, Store: &idem.Store{}}, Tokens: testTokens(), Flaws: flaws}))
		body := `{"from":11,"to":21,"amountKobo":1000000}`
		first := do(t, "POST", srv.URL+"/transfers", post("token-ada", "key-0000000000000001"), body)
		again := do(t, "POST", srv.URL+"/transfers", post("token-ada", "key-0000000000000001"), body)
		srv.Close()
		if first.status != 201 || again.status != 201 || again.header.Get(api.HeaderReplayed) != "true" {
			t.Fatalf("%+v: %d then %d (replayed %q), want 201 and its replay", flaws, first.status, again.status, again.header.Get(api.HeaderReplayed))
		}
		var a, b any
		if json.Unmarshal([]byte(first.body), &a) != nil || json.Unmarshal([]byte(again.body), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%+v: the replay %s is not the same JSON as %s", flaws, again.body, first.body)
		}
		if same := again.body == first.body; same == flaws.ReencodedReplays {
			t.Errorf("%+v: first %s, replay %s: the same bytes %v, want %v", flaws, first.body, again.body, same, !flaws.ReencodedReplays)
		}
	}
}
