package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// lockedBuffer is a buffer several goroutines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 19, item 4: serve stopped (Ctrl-C) while 16 clients send transfers
// texts every transfer that committed exactly once before the bank is
// dropped. The stop is made to come while the dispatcher has a claim in
// flight (a hook holds its first send until the dispatcher is stopped): the
// rows of that claim are the ones the last drain used to pass over, their
// lease still running, and the bank was dropped with them unsent.
func TestServeStopUnderLoadTextsEveryCommittedTransferOnce(t *testing.T) {
	t.Parallel()
	const (
		clients   = 16
		perClient = 20 // at most 320 transfers: the load is bounded
		stopAfter = 60 // 201s before the stop, with the claim in flight
	)
	var out, errOut lockedBuffer
	app := &App{Env: &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start}}
	defer app.close()

	listening := make(chan string, 1)
	inFlight := make(chan outbox.Row, 1)
	var held atomic.Bool
	type leftover struct {
		committed map[int64]bool
		unsent    int
		sms       []outbox.SMS
		err       error
	}
	stopped := make(chan leftover, 1)
	o := serveOptions{addr: "127.0.0.1:0", grace: 30 * time.Second, quiet: true}
	o.hooks.listening = func(url string) { listening <- url }
	o.hooks.dispatch.BeforeSend = func(ctx context.Context, r outbox.Row) {
		if !held.CompareAndSwap(false, true) {
			return
		}
		inFlight <- r
		select {
		case <-ctx.Done(): // serve stops its dispatcher
		case <-time.After(60 * time.Second):
			t.Errorf("waited 60s for serve to stop its dispatcher, which holds outbox row %d", r.ID)
		}
	}
	o.hooks.stopped = func(ctx context.Context, db bank.DB, sms *outbox.Provider) {
		var l leftover
		defer func() { stopped <- l }()
		l.sms = sms.Messages()
		rows, err := db.Query(ctx, "SELECT id::bigint FROM transfers")
		if err != nil {
			l.err = err
			return
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			l.err = err
			return
		}
		l.committed = map[int64]bool{}
		for _, id := range ids {
			l.committed[id] = true
		}
		l.err = db.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE done_at IS NULL").Scan(&l.unsent)
	}

	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	served := make(chan error, 1)
	go func() { served <- runServe(ctx, app, o) }()
	start := time.Now()
	var url string
	select {
	case url = <-listening:
		t.Logf("%s: listening", time.Since(start))
	case err := <-served:
		t.Fatalf("serve returned before it listened: %v\nstderr:\n%s", err, errOut.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("waited 2 minutes for serve to listen; stderr:\n%s", errOut.String())
	}

	var (
		mu       sync.Mutex
		answered = map[int64]int{} // transfer id → 201s naming it
		statuses = map[int]int{}
		created  atomic.Int64
		enough   = make(chan struct{})
		once     sync.Once
		wg       sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Ada and Bola: Chidi's account is frozen in the lesson's bank.
			user := int64(c%2 + 1)
			token := []string{"token-ada", "token-bola"}[user-1]
			hc := &http.Client{Timeout: 60 * time.Second}
			for i := range perClient {
				body := fmt.Sprintf(`{"from":%d,"to":%d,"amountKobo":100}`, user, 3-user)
				req, _ := http.NewRequest("POST", url+"/transfers", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("stop-under-load-%02d-%03d", c, i))
				res, err := hc.Do(req)
				if err != nil {
					return // serve has stopped listening
				}
				b, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				mu.Lock()
				statuses[res.StatusCode]++
				mu.Unlock()
				if res.StatusCode != 201 {
					t.Logf("client %d: %d %s", c, res.StatusCode, b)
					return
				}
				var rc struct {
					TransferID int64 `json:"transferId"`
				}
				if err := json.Unmarshal(b, &rc); err != nil || rc.TransferID == 0 {
					t.Errorf("a 201 without a transfer id: %s", b)
					return
				}
				mu.Lock()
				answered[rc.TransferID]++
				mu.Unlock()
				if created.Add(1) >= stopAfter {
					once.Do(func() { close(enough) })
				}
			}
		}()
	}
	var row outbox.Row
	select {
	case row = <-inFlight:
	case <-time.After(60 * time.Second):
		t.Fatalf("waited 60s for the dispatcher to claim a row and come to send it")
	}
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatalf("waited 60s for %d transfers to be answered 201; %d were", stopAfter, created.Load())
	}
	t.Logf("%s: interrupt", time.Since(start))
	interrupt() // Ctrl-C, with the clients still sending and outbox row row.ID claimed
	var err error
	select {
	case err = <-served:
	case <-time.After(90 * time.Second):
		t.Fatalf("waited 90s for serve to stop; stderr:\n%s", errOut.String())
	}
	t.Logf("%s: served", time.Since(start))
	wg.Wait() // bounded: serve no longer listens, and every client has a timeout
	if err != context.Canceled {
		t.Errorf("serve returned %v, want the interrupt (context.Canceled)", err)
	}
	var l leftover
	select {
	case l = <-stopped:
	default:
		t.Fatalf("serve stopped without reaching its stopped hook; stderr:\n%s", errOut.String())
	}
	if l.err != nil {
		t.Fatalf("reading the bank before it was dropped: %v", l.err)
	}
	t.Logf("%d clients: %d transfers answered 201 (statuses %v), %d committed, %d SMS sent; stopped with outbox row %d (transfer %d) claimed",
		clients, len(answered), statuses, len(l.committed), len(l.sms), row.ID, row.TransferID)

	for id, n := range answered {
		if !l.committed[id] || n != 1 {
			t.Errorf("transfer %d was answered 201 %d times, committed: %v", id, n, l.committed[id])
		}
	}
	if len(l.committed) != len(answered) {
		t.Errorf("%d transfers committed, %d answered 201: with a grace of %s every request in flight finishes", len(l.committed), len(answered), o.grace)
	}
	texted := map[int64]int{}
	for _, m := range l.sms {
		texted[m.TransferID]++
	}
	var missing, twice []int64
	for id := range l.committed {
		switch texted[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	for id := range texted {
		if !l.committed[id] {
			t.Errorf("an SMS for transfer %d, which did not commit", id)
		}
	}
	if len(missing) > 0 || len(twice) > 0 || len(l.sms) != len(l.committed) || l.unsent != 0 {
		t.Errorf("%d transfers committed, %d SMS sent, %d outbox rows unsent when the bank was dropped; never texted: %v; texted more than once: %v",
			len(l.committed), len(l.sms), l.unsent, missing, twice)
	}
	if want := fmt.Sprintf("SMS sent: %d\n", len(l.committed)); !strings.Contains(out.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(errOut.String(), "could not be sent") {
		t.Errorf("serve says some rows could not be sent:\n%s", errOut.String())
	}
}

// serve --bug no-balance-floor serves a bank without the balance's CHECK,
// as the mistake's chaos runs and scenarios have it: a warning that names
// the mistake over a bank that still refuses to overdraw would be a lie.
// Without --bug, serve's bank has the CHECK.
func TestServeRunsOnTheMistakesSchema(t *testing.T) {
	t.Parallel()
	for _, bug := range []string{"no-balance-floor", ""} {
		var out, errOut lockedBuffer
		app := &App{Env: &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
			Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start}}
		o := serveOptions{addr: "127.0.0.1:0", grace: time.Second, quiet: true, bug: bug}
		ctx, interrupt := context.WithCancel(context.Background())
		o.hooks.listening = func(string) { interrupt() }
		type floor struct {
			ok  bool
			err error
		}
		seen := make(chan floor, 1)
		o.hooks.stopped = func(ctx context.Context, db bank.DB, _ *outbox.Provider) {
			ok, err := pgtest.HasBalanceFloor(ctx, db)
			seen <- floor{ok, err}
		}
		served := make(chan error, 1)
		go func() { served <- runServe(ctx, app, o) }()
		select {
		case err := <-served:
			if err != context.Canceled {
				t.Errorf("--bug %q: serve returned %v, want the interrupt; stderr:\n%s", bug, err, errOut.String())
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("--bug %q: waited 2 minutes for serve to listen and stop; stderr:\n%s", bug, errOut.String())
		}
		interrupt()
		app.close()
		select {
		case f := <-seen:
			if want := bug == ""; f.err != nil || f.ok != want {
				t.Errorf("--bug %q: the CHECK (balance_kobo >= 0) in serve's bank: %v (%v), want %v", bug, f.ok, f.err, want)
			}
		default:
			t.Errorf("--bug %q: serve stopped without reaching its stopped hook; stderr:\n%s", bug, errOut.String())
		}
	}
}
