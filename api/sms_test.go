package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

// A transfer over HTTP texts its sender exactly once, through the outbox:
// nothing is sent before the dispatcher runs, the replay adds nothing, and
// GET /sms shows each caller only their own messages.
func TestTransferTextsItsSenderOnce(t *testing.T) {
	pool := newBank(t, 4)
	sms := outbox.NewProvider(1)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, Effects: &outbox.Effects{DB: pool, SMS: sms}}
	srv := httptest.NewServer(api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens(), Log: t.Logf, SMS: sms}))
	defer srv.Close()
	do := func(method, path, token, key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	messages := func(token string) []map[string]any {
		t.Helper()
		res := do("GET", "/sms", token, "", "")
		defer res.Body.Close()
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&body) != nil {
			t.Fatalf("GET /sms as %s: %d", token, res.StatusCode)
		}
		return body.Messages
	}
	for range 2 {
		res := do("POST", "/transfers", "token-ada", "sms-test-key-000000001", `{"from":11,"to":21,"amountKobo":1000000}`)
		res.Body.Close()
		if res.StatusCode != 201 {
			t.Fatalf("POST: %d", res.StatusCode)
		}
	}
	if m := messages("token-ada"); len(m) != 0 {
		t.Fatalf("SMS before the dispatcher ran: %v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := (&outbox.Dispatcher{DB: pool, Name: "d", SMS: sms}).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	m := messages("token-ada")
	if len(m) != 1 || m[0]["text"] != "You sent ₦10,000 to Bola" || m[0]["transferId"] != float64(1) {
		t.Errorf("Ada's SMS: %v, want one about transfer 1", m)
	}
	if m := messages("token-bola"); len(m) != 0 {
		t.Errorf("Bola sees %v, someone else's messages", m)
	}
	if res := do("GET", "/sms", "", "", ""); res.StatusCode != 401 {
		t.Errorf("GET /sms without a token: %d, want 401", res.StatusCode)
	}
	if res := do("POST", "/sms", "token-ada", "", ""); res.StatusCode != 405 {
		t.Errorf("POST /sms: %d, want 405", res.StatusCode)
	}
}
