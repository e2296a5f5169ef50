package probe_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/banksim/bank-sim/probe"
)

// A request in another API's names: the members, the credentials and the
// key go where the contract says, and account ids that are not numbers are
// sent as strings.
func TestContractSpellsTheRequestInTheTargetsNames(t *testing.T) {
	c := probe.LessonContract()
	c.Path, c.KeyHeader, c.AuthHeader, c.AuthScheme = "/v1/payments", "X-Request-Key", "X-Api-Key", ""
	c.FromField, c.ToField, c.AmountField = "source", "destination", "amount"
	req, err := c.NewRequest("http://127.0.0.1:9000/", probe.User{Name: "ada", Token: "s3cret"}, "k-0123456789abcdef",
		probe.Transfer{From: "acc_ada", To: "17", Amount: 1_000_050})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if got, want := string(body), `{"source":"acc_ada","destination":17,"amount":1000050}`; got != want {
		t.Errorf("body %s, want %s", got, want)
	}
	if req.URL.String() != "http://127.0.0.1:9000/v1/payments" || req.Method != "POST" {
		t.Errorf("%s %s", req.Method, req.URL)
	}
	if req.Header.Get("X-Api-Key") != "s3cret" || req.Header.Get("X-Request-Key") != "k-0123456789abcdef" || req.Header.Get("Authorization") != "" {
		t.Errorf("headers %v", req.Header)
	}
	nokey, _ := c.NewRequest("http://127.0.0.1:9000", probe.User{Token: "s3cret"}, "", probe.Transfer{From: "1", To: "2", Amount: 1})
	if _, sent := nokey.Header["X-Request-Key"]; sent {
		t.Errorf("a request without a key sent the key header: %v", nokey.Header)
	}
}

// An answer read through the contract: a nested id, a numeric-string
// balance, the replay mark, a refusal's code from "code" or "error".
func TestContractReadsTheAnswer(t *testing.T) {
	c := probe.LessonContract()
	c.IDField, c.BalanceField = "payment.id", "payment.balance"
	h := http.Header{}
	h.Set("Idempotent-Replayed", "true")
	a := c.Read(201, h, []byte(`{"payment":{"id":"pay_7","balance":"4990000"}}`))
	if a.TransferID != `"pay_7"` || a.Balance == nil || *a.Balance != 4_990_000 || !a.Replayed || !a.Receipt() {
		t.Errorf("read %+v", a)
	}
	a = c.Read(201, http.Header{}, []byte(`{"payment":{"id":7,"balance":10.5}}`))
	if a.TransferID != "7" || a.Balance != nil || a.Replayed {
		t.Errorf("a fractional balance must not be read as money, nor a missing header as a replay: %+v", a)
	}
	for body, code := range map[string]string{`{"code":"idempotency_key_reused"}`: "idempotency_key_reused", `{"error":"insufficient_funds"}`: "insufficient_funds"} {
		if a := c.Read(422, http.Header{}, []byte(body)); a.Code != code || a.Receipt() || !a.Settled() {
			t.Errorf("%s: %+v", body, a)
		}
	}
	for _, status := range []int{409, 429, 500, 503} {
		if a := c.Read(status, http.Header{}, nil); a.Settled() {
			t.Errorf("%d must not be taken as a final answer", status)
		}
	}
}

func TestKoboReadsAsNaira(t *testing.T) {
	for k, want := range map[int64]string{0: "₦0", 1: "₦0.01", 1_000_050: "₦10,000.50", 7_500_000: "₦75,000", -10_011: "-₦100.11", 123_456_789_00: "₦123,456,789"} {
		if got := probe.Kobo(k); got != want {
			t.Errorf("Kobo(%d) = %s, want %s", k, got, want)
		}
	}
}

// Keys come from the seed, the check and the number alone, look like UUIDs
// (which any key validator accepts), and differ when any of them does.
func TestKeysComeFromTheSeed(t *testing.T) {
	k := probe.Key(42, "replay", 1)
	if k != probe.Key(42, "replay", 1) {
		t.Error("the same seed gave another key")
	}
	if len(k) != 36 || k[14] != '4' {
		t.Errorf("%q is not a version-4 UUID", k)
	}
	seen := map[string]bool{}
	for _, other := range []string{k, probe.Key(43, "replay", 1), probe.Key(42, "storm", 1), probe.Key(42, "replay", 2)} {
		if seen[other] {
			t.Errorf("key %s repeats", other)
		}
		seen[other] = true
	}
}

func TestLoopback(t *testing.T) {
	ctx := context.Background()
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.8.9.10": true, "192.0.2.1": false, "10.0.0.1": false, "0.0.0.0": false} {
		if got, err := probe.Loopback(ctx, host); got != want || err != nil {
			t.Errorf("Loopback(%s) = %v, %v; want %v", host, got, err, want)
		}
	}
}
