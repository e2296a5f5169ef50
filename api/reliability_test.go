package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defect 2 of issue 7: ids beyond PostgreSQL's integer are accounts and
// transfers that do not exist, answered as account 99 is, never 500.
func TestIdsBeyondIntegerAreNotFound(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 4)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"recipient 99", "POST", "/transfers", `{"from":11,"to":99,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"recipient 2^31", "POST", "/transfers", `{"from":11,"to":2147483648,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"recipient 2^53-1", "POST", "/transfers", `{"from":11,"to":9007199254740991,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"sender 2^31", "POST", "/transfers", `{"from":2147483648,"to":21,"amountKobo":100}`, 404, bank.CodeAccountNotFound},
		{"account 99", "GET", "/accounts/99", "", 404, bank.CodeAccountNotFound},
		{"account 2^31", "GET", "/accounts/2147483648", "", 404, bank.CodeAccountNotFound},
		{"transfer 2^31", "GET", "/transfers/2147483648", "", 404, api.CodeNotFound},
		{"transfer 2^53-1", "GET", "/transfers/9007199254740991", "", 404, api.CodeNotFound},
	}
	for i, c := range cases {
		h := post("token-ada", fmt.Sprintf("big-id-key-%08d", i))
		a := do(t, c.method, srv.URL+c.path, h, c.body)
		if a.status != c.status || a.problem.Code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, a.status, a.body, c.status, c.code)
		}
	}
	if _, transfers := counts(t, pool); transfers != 0 {
		t.Errorf("%d transfers written", transfers)
	}
}

// FuzzTransferRequest sends any method, path, body and set of headers to the
// API: no input may get a 5xx, and a request that is not a 201 moves no
// money; one refused before the database (400, 401, 404 route, 405, 413,
// 415) writes no key either. `go test` runs the seed corpus.
func FuzzTransferRequest(f *testing.F) {
	good := `{"from":11,"to":21,"amountKobo":100}`
	seeds := []struct{ method, path, body, keys, auths, ctype string }{
		{"POST", "/transfers", good, "fuzz-seed-key-000001", "token-ada", "application/json"},
		{"POST", "/transfers", `{"from":11,"to":2147483648,"amountKobo":100}`, "fuzz-seed-key-000002", "token-ada", "application/json"},
		{"POST", "/transfers", `{"from":2147483648,"to":11,"amountKobo":100}`, "fuzz-seed-key-000003", "token-bola", "application/json"},
		{"POST", "/transfers", `{"from":11,"to":-2147483649,"amountKobo":100}`, "fuzz-seed-key-000004", "token-ada", "application/json"},
		{"POST", "/transfers", `{"from":11,"to":21,"amountKobo":9223372036854775807}`, "fuzz-seed-key-000005", "token-ada", "application/json"},
		{"POST", "/transfers", good, "fuzz-seed-key-000006\nfuzz-seed-key-000007", "token-ada", "application/json"},
		{"POST", "/transfers", good, "fuzz-seed-key-000008", "token-ada\ntoken-bola", "application/json"},
		{"POST", "/transfers", good, "fuzz-seed-key-000009", "token-ada", "application/json; charset=utf-8"},
		{"POST", "/transfers", good, "", "token-ada", "application/json"},
		{"POST", "/transfers", good, "fuzz-seed-key-000010", "", "text/plain"},
		{"GET", "/accounts/2147483648", "", "", "token-ada", ""},
		{"GET", "/accounts/-1", "", "", "token-ada", ""},
		{"GET", "/accounts/99999999999999999999", "", "", "token-ada", ""},
		{"GET", "/transfers/9007199254740991", "", "", "token-ada", ""},
		{"GET", "/transfers/9007199254740992", "", "", "token-ada", ""},
		{"GET", "/transfers?key=fuzz-seed-key-000001", "", "", "token-ada", ""},
		{"GET", "/transfers?key=fuzz-seed-key-000001&key=fuzz-seed-key-000002", "", "", "token-ada", ""},
		{"GET", "/transfers?key=%00%00", "", "", "token-ada", ""},
		{"DELETE", "/transfers/1", "", "", "token-ada", ""},
		{"PUT", "/accounts/11", good, "", "token-ada", "application/json"},
		{"GET", "/nope", "", "", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.body, s.keys, s.auths, s.ctype)
	}
	srv, pool := newServer(f, 4)
	f.Fuzz(func(t *testing.T, method, path, body, keys, auths, ctype string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		for _, k := range strings.Split(keys, "\n") {
			if k != "" {
				req.Header.Add(api.HeaderKey, k)
			}
		}
		for _, a := range strings.Split(auths, "\n") {
			if a != "" {
				req.Header.Add("Authorization", "Bearer "+a)
			}
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		keysBefore, before := counts(t, pool)
		ledgerBefore, err := bank.ReadLedger(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return // the client refused to send it (a bad header value)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s (keys %q, auth %q, type %q) %q: %d %s", method, path, keys, auths, ctype, body, res.StatusCode, b)
		}
		keysAfter, after := counts(t, pool)
		if res.StatusCode != 201 {
			ledgerAfter, err := bank.ReadLedger(context.Background(), pool)
			if err != nil {
				t.Fatal(err)
			}
			if after != before || ledgerAfter.Line() != ledgerBefore.Line() {
				t.Fatalf("%s %s %q answered %d moved money: %s → %s", method, path, body, res.StatusCode, ledgerBefore.Line(), ledgerAfter.Line())
			}
		}
		switch res.StatusCode {
		case 400, 401, 405, 413, 415:
			if keysAfter != keysBefore {
				t.Fatalf("%s %s %q answered %d wrote a key", method, path, body, res.StatusCode)
			}
		}
	})
}

// Defect 7 of issue 7: a request with two Idempotency-Keys, or two
// Authorizations, is refused with 400 and writes nothing: which copy counts
// is not defined, so two parsers could read it two ways.
func TestDuplicateHeadersAreRefused(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 4)
	body := `{"from":11,"to":21,"amountKobo":1000000}`
	send := func(keys, tokens []string, method, path, body string) answer {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for _, k := range keys {
			req.Header.Add(api.HeaderKey, k)
		}
		for _, tok := range tokens {
			req.Header.Add("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return answer{status: res.StatusCode, header: res.Header, body: string(b)}
	}
	for _, c := range []struct {
		name   string
		keys   []string
		tokens []string
	}{
		{"two keys", []string{"dup-key-000000000001", "dup-key-000000000002"}, []string{"token-ada"}},
		{"the same key twice", []string{"dup-key-000000000003", "dup-key-000000000003"}, []string{"token-ada"}},
		{"two tokens", []string{"dup-key-000000000004"}, []string{"token-ada", "token-bola"}},
	} {
		a := send(c.keys, c.tokens, "POST", "/transfers", body)
		if a.status != 400 || !strings.Contains(a.body, `"code":"`+api.CodeDuplicate+`"`) || a.header.Get("Content-Type") != api.ProblemType {
			t.Errorf("%s: %d %s, want 400 %s", c.name, a.status, a.body, api.CodeDuplicate)
		}
	}
	if a := send(nil, []string{"token-ada"}, "GET", "/transfers?key=dup-key-000000000001&key=dup-key-000000000002", ""); a.status != 400 {
		t.Errorf("GET with two keys: %d %s, want 400", a.status, a.body)
	}
	if keys, transfers := counts(t, pool); keys != 0 || transfers != 0 {
		t.Errorf("refused requests wrote %d keys and %d transfers", keys, transfers)
	}
	if a := send([]string{"dup-key-000000000001"}, []string{"token-ada"}, "POST", "/transfers", body); a.status != 201 {
		t.Errorf("one key, one token: %d %s, want 201", a.status, a.body)
	}
}

// Defect 6 of issue 7, over HTTP: the replay of POST and the answer of GET
// /transfers?key= are the first answer's bytes.
func TestHTTPReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, 4)
	const key = "bytes-key-0000000001"
	body := `{"from":11,"to":21,"amountKobo":1000000}`
	first := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), body)
	replay := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), `{"amountKobo":1000000,"to":21,"from":11}`)
	byKey := do(t, "GET", srv.URL+"/transfers?key="+key, post("token-ada", ""), "")
	if first.status != 201 || replay.body != first.body || byKey.body != first.body {
		t.Errorf("first %d %s\nreplay %s\nby key %s", first.status, first.body, replay.body, byKey.body)
	}
}

// Defect 3 of issue 7: 20 transfers wait on a row held locked when the server
// is told to stop. The grace period runs out: every one is answered 503 with
// Retry-After, its key released; no handler meets a closed pool, because
// Drain returns only after every handler has. The pool is closed after.
func TestDrainAnswers503AndReleasesKeys(t *testing.T) {
	t.Parallel()
	statuses, pool, drainErr, cut := drainWithLockHeld(t, 300*time.Millisecond, 3*time.Second)
	if drainErr != nil || !cut {
		t.Fatalf("Drain: cut=%v %v", cut, drainErr)
	}
	if statuses[503] != 20 || len(statuses) != 1 {
		t.Errorf("statuses %v, want 20 × 503", statuses)
	}
	if keys, transfers := counts(t, pool); keys != 0 || transfers != 0 {
		t.Errorf("%d keys and %d transfers left, want every key released and nothing moved", keys, transfers)
	}
}

// When the lock is let go within the grace period, every request finishes.
func TestDrainLetsRequestsFinishWithinGrace(t *testing.T) {
	t.Parallel()
	statuses, pool, drainErr, cut := drainWithLockHeld(t, 10*time.Second, 300*time.Millisecond)
	if drainErr != nil || cut {
		t.Fatalf("Drain: cut=%v %v", cut, drainErr)
	}
	if statuses[201] != 20 || len(statuses) != 1 {
		t.Errorf("statuses %v, want 20 × 201", statuses)
	}
	if keys, transfers := counts(t, pool); keys != 20 || transfers != 20 {
		t.Errorf("%d keys and %d transfers, want 20 and 20", keys, transfers)
	}
}

// drainWithLockHeld holds Ada's account row locked for hold (or until the
// drain is over, if sooner), sends 20 transfers from it, and drains the
// server with grace once all 20 have claimed their key and wait on the row.
func drainWithLockHeld(t *testing.T, grace, hold time.Duration) (map[int]int, *pgxpool.Pool, error, bool) {
	t.Helper()
	const n = 20
	ctx := context.Background()
	pool := newBank(t, n+4)
	stopping, stop := context.WithCancel(ctx)
	defer stop()
	ls := serveLive(t, &idem.Handler{DB: pool, Store: &idem.Store{}, Stopping: stopping})

	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Let go of the row on every way out, before the pool closes.
	t.Cleanup(func() { _ = locker.Rollback(ctx) })
	if _, err := locker.Exec(ctx, "SELECT 1 FROM accounts WHERE id = 11 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	httpc := &http.Client{Timeout: 30 * time.Second}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", ls.url+"/transfers", strings.NewReader(`{"from":11,"to":21,"amountKobo":100}`))
			req.Header.Set("Authorization", "Bearer token-ada")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(api.HeaderKey, fmt.Sprintf("drain-key-%010d", i))
			res, err := httpc.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[0]++
				return
			}
			_ = res.Body.Close()
			if res.StatusCode == 503 && res.Header.Get(api.HeaderRetryAfter) == "" {
				statuses[-503]++ // a 503 without Retry-After
				return
			}
			statuses[res.StatusCode]++
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, "SELECT count(*) FROM idempotency_keys") < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %d requests to claim their keys", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// hold counts from here, once every request waits on the row: counted
	// from the lock, a loaded machine could spend it on the claims, and the
	// row would be free before the grace period ends.
	// The row is let go after hold, or as soon as Drain has returned: held
	// through the whole drain either way, and a drain that is cut short
	// does not wait out the rest of hold.
	drained := make(chan struct{})
	unlocked := make(chan struct{})
	go func() {
		defer close(unlocked)
		select {
		case <-time.After(hold):
		case <-drained:
		}
		_ = locker.Rollback(ctx)
	}()
	t.Cleanup(func() { <-unlocked })
	cut, drainErr := api.Drain(ls.srv, grace, stop)
	close(drained)
	if ls.running.Load() != 0 {
		t.Errorf("Drain returned with %d handlers still running", ls.running.Load())
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for the clients to hear their answers")
	}
	return statuses, pool, drainErr, cut
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
