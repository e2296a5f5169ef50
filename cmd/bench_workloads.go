package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchLayout is the accounts a bench run moves money between: every
// transfer goes from one of them to another, both picked at random. On a
// few hot accounts transfers queue for the same rows all the time (on two,
// every transfer crosses or follows another); spread over many, they
// rarely meet.
type benchLayout struct {
	Accounts int  `json:"accounts"`
	Hot      bool `json:"hot"`
}

func (l benchLayout) String() string {
	if l.Hot {
		return fmt.Sprintf("%d hot accounts", l.Accounts)
	}
	return fmt.Sprintf("%d accounts (spread)", l.Accounts)
}

// benchAmount is what every bench transfer moves: ₦1.
const benchAmount = 100

// benchOpening is every bench account's opening balance, ₦1,000,000: far
// more than a random walk of ₦1 steps wanders in any run.
const benchOpening = 100_000_000

// benchAccounts are the opening accounts of a layout: account n belongs to
// user n.
func benchAccounts(l benchLayout) []bank.Account {
	out := make([]bank.Account, l.Accounts)
	for i := range out {
		id := int64(i + 1)
		out[i] = bank.Account{ID: id, OwnerID: id, Holder: fmt.Sprintf("Account %d", id), Status: "active", BalanceKobo: benchOpening}
	}
	return out
}

// benchPair picks two distinct accounts of n, as the pgbench scripts do
// (pgbenchPair): from uniformly, to uniformly among the others.
func benchPair(r *rand.Rand, n int) (from, to int64) {
	from = int64(1 + r.IntN(n))
	to = int64(1 + r.IntN(n-1))
	if to >= from {
		to++
	}
	return from, to
}

// benchTarget is what one run's operations work on.
type benchTarget struct {
	pool   *pgxpool.Pool
	layout benchLayout
	run    int    // this run's number, so that its keys are its own
	http   string // the API's URL, for the HTTP workloads
	hc     *http.Client
}

// benchOp is one operation of a worker: a transfer, a request. r is the
// worker's own random source.
type benchOp func(ctx context.Context, worker, i int, r *rand.Rand) error

// benchWorkload is one row of the bench: what bank-sim does, and the same
// SQL as a pgbench script.
type benchWorkload struct {
	key  string // its name for --only
	name string
	http bool // runs through the HTTP API (--http)
	op   func(t *benchTarget) benchOp
	// pgbench is the workload's statements, one at a time, as the
	// statement-at-a-time code sends them.
	pgbench func(l benchLayout) pgbenchScript
}

// The replay workloads' key, completed once per bank before any run.
const (
	replayKey  = "bench-replayed-key-0001"
	replayUser = 1
)

func replayBody() []byte {
	return bank.TransferRequest{From: 1, To: 2, AmountKobo: benchAmount}.Body()
}

// benchKeyHash stands in for a fingerprint in the pgbench scripts (pgbench
// cannot hash): 64 hex digits, as long as a real one.
const benchKeyHash = "5f0c2d4e8a1b4c3d9e7f1a2b3c4d5e6f5f0c2d4e8a1b4c3d9e7f1a2b3c4d5e6f"

func benchWorkloads() []benchWorkload {
	want201 := func(resp bank.Response, err error) error {
		if err == nil && resp.Status != 201 {
			err = fmt.Errorf("answer %s", resp.Summary())
		}
		return err
	}
	newKey := func(t *benchTarget, worker, i int) string {
		return fmt.Sprintf("bench-%06d-%03d-%010d", t.run, worker, i)
	}
	handler := func(unpipelined bool) func(t *benchTarget) benchOp {
		return func(t *benchTarget) benchOp {
			h := &idem.Handler{DB: t.pool, Store: &idem.Store{}, Unpipelined: unpipelined}
			return func(ctx context.Context, worker, i int, r *rand.Rand) error {
				from, to := benchPair(r, t.layout.Accounts)
				return want201(h.Handle(ctx, idem.Request{UserID: from, Key: newKey(t, worker, i),
					Body: bank.TransferRequest{From: from, To: to, AmountKobo: benchAmount}.Body()}))
			}
		}
	}
	replay := func(t *benchTarget) benchOp {
		h := &idem.Handler{DB: t.pool, Store: &idem.Store{}}
		return func(ctx context.Context, _, _ int, _ *rand.Rand) error {
			resp, err := h.Handle(ctx, idem.Request{UserID: replayUser, Key: replayKey, Body: replayBody()})
			if err == nil && !resp.Replayed {
				err = fmt.Errorf("answer %s, not a replay", resp.Summary())
			}
			return want201(resp, err)
		}
	}
	overHTTP := func(replayed bool) func(t *benchTarget) benchOp {
		return func(t *benchTarget) benchOp {
			return func(ctx context.Context, worker, i int, r *rand.Rand) error {
				user, key, body := int64(replayUser), replayKey, replayBody()
				if !replayed {
					from, to := benchPair(r, t.layout.Accounts)
					user, key, body = from, newKey(t, worker, i), bank.TransferRequest{From: from, To: to, AmountKobo: benchAmount}.Body()
				}
				return postTransfer(ctx, t, user, key, body, replayed)
			}
		}
	}
	keyedScript := func(l benchLayout) pgbenchScript {
		return pgbenchScript{
			text: pgbenchPair + `\set k random(1, 9000000000000000000)` + "\n" +
				pgbenchSQL(idem.ClaimSQL, ":from", ":k", ":hash", ":k", ":ttl", "NULL") +
				"BEGIN;\n" +
				pgbenchSQL(bank.LockAccountsSQL, ":from", ":to") +
				pgbenchSQL(bank.DebitSQL, ":amount", ":from") +
				pgbenchSQL(bank.CreditSQL, ":amount", ":to") +
				pgbenchSQL(bank.InsertTransferSQL, ":from", ":to", ":amount", "NULL") +
				pgbenchSQL(idem.CompleteSQL, ":from", ":k", ":k", "201", ":body") +
				"COMMIT;\n",
			defines: benchDefines(l),
		}
	}
	replayScript := func(l benchLayout) pgbenchScript {
		d := benchDefines(l)
		d["replaykey"] = replayKey
		return pgbenchScript{
			text: `\set k random(1, 9000000000000000000)` + "\n" +
				pgbenchSQL(idem.ClaimSQL, strconv.Itoa(replayUser), ":replaykey", ":hash", ":k", ":ttl", "NULL"),
			defines: d,
		}
	}
	return []benchWorkload{
		{
			key: "plain", name: "transfer, both rows locked in id order",
			op: func(t *benchTarget) benchOp {
				return func(ctx context.Context, _, _ int, r *rand.Rand) error {
					from, to := benchPair(r, t.layout.Accounts)
					return want201(bank.PipelinedTransfer(ctx, t.pool, from, bank.TransferRequest{From: from, To: to, AmountKobo: benchAmount}))
				}
			},
			pgbench: func(l benchLayout) pgbenchScript {
				return pgbenchScript{
					text: pgbenchPair + "BEGIN;\n" +
						pgbenchSQL(bank.LockAccountsSQL, ":from", ":to") +
						pgbenchSQL(bank.DebitSQL, ":amount", ":from") +
						pgbenchSQL(bank.CreditSQL, ":amount", ":to") +
						pgbenchSQL(bank.InsertTransferSQL, ":from", ":to", ":amount", "NULL") +
						"COMMIT;\n",
					defines: benchDefines(l),
				}
			},
		},
		{
			key: "lesson", name: "transfer, sender row locked only (lesson)",
			op: func(t *benchTarget) benchOp {
				return func(ctx context.Context, _, _ int, r *rand.Rand) error {
					from, to := benchPair(r, t.layout.Accounts)
					var resp bank.Response
					err := bank.InTx(ctx, t.pool, func(tx pgx.Tx) error {
						var err error
						resp, err = bank.TransferWith(ctx, tx, from, bank.TransferRequest{From: from, To: to, AmountKobo: benchAmount},
							bank.Flaws{SenderLockOnly: true})
						return err
					})
					return want201(resp, err)
				}
			},
			pgbench: func(l benchLayout) pgbenchScript {
				return pgbenchScript{
					text: pgbenchPair + "BEGIN;\n" +
						pgbenchSQL(bank.LockSenderSQL, ":from") +
						pgbenchSQL(bank.ReadRecipientSQL, ":to") +
						pgbenchSQL(bank.DebitSQL, ":amount", ":from") +
						pgbenchSQL(bank.CreditSQL, ":amount", ":to") +
						pgbenchSQL(bank.InsertTransferSQL, ":from", ":to", ":amount", "NULL") +
						"COMMIT;\n",
					defines: benchDefines(l),
				}
			},
		},
		{key: "keyed", name: "handler, a new key per request", op: handler(false), pgbench: keyedScript},
		{key: "keyed-unpipelined", name: "handler, a new key per request, one statement at a time", op: handler(true), pgbench: keyedScript},
		{key: "replay", name: "handler, replays of one key", op: replay, pgbench: replayScript},
		{key: "keyed-http", name: "handler over HTTP, a new key per request", http: true, op: overHTTP(false), pgbench: keyedScript},
		{key: "replay-http", name: "handler over HTTP, replays of one key", http: true, op: overHTTP(true), pgbench: replayScript},
	}
}

// benchDefines are the pgbench variables every script may use.
func benchDefines(l benchLayout) map[string]string {
	return map[string]string{
		"accounts": strconv.Itoa(l.Accounts),
		"amount":   strconv.Itoa(benchAmount),
		"hash":     benchKeyHash,
		"ttl":      idem.DefaultLockTTL.String(),
		// A 201's body of the usual length.
		"body": string(bank.Created(bank.Receipt{TransferID: 123456, From: 12, To: 34, AmountKobo: benchAmount, BalanceKobo: benchOpening}).Body),
	}
}

// benchToken is user id's bearer token on the bench's API.
func benchToken(id int64) string { return fmt.Sprintf("bench-token-%d", id) }

func benchTokens(l benchLayout) map[string]int64 {
	m := map[string]int64{}
	for id := int64(1); id <= int64(l.Accounts); id++ {
		m[benchToken(id)] = id
	}
	return m
}

// postTransfer sends POST /transfers as a busy client would, on a
// keep-alive connection, and wants a 201 (a replay when replayed).
func postTransfer(ctx context.Context, t *benchTarget, user int64, key string, body []byte, replayed bool) error {
	req, err := http.NewRequestWithContext(ctx, "POST", t.http+"/transfers", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchToken(user))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderKey, key)
	res, err := t.hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != 201 || (res.Header.Get(api.HeaderReplayed) == "true") != replayed {
		return fmt.Errorf("answer %d (%s: %q)", res.StatusCode, api.HeaderReplayed, res.Header.Get(api.HeaderReplayed))
	}
	return nil
}
