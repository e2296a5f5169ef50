package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

type benchOptions struct {
	duration time.Duration
	clients  int
	asJSON   bool
}

// benchResult is one workload's figures.
type benchResult struct {
	Workload  string        `json:"workload"`
	Ops       int           `json:"ops"`
	PerSecond float64       `json:"perSecond"`
	P50       time.Duration `json:"p50Ns"`
	P99       time.Duration `json:"p99Ns"`
	Deadlocks int64         `json:"deadlocks"`
	Errors    int64         `json:"errors"`
}

func newBenchCmd(app *App) *cobra.Command {
	o := benchOptions{duration: 3 * time.Second, clients: 16}
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure transfers per second on hot accounts, with each locking strategy and through the key store",
		Long: `Runs each workload for --duration with --clients goroutines on one
connection pool, every client moving ₦1 back and forth between Ada and Bola,
so that transfers cross (A→B while B→A) all the time:

  transfer, both rows locked in id order   bank-sim's transfer
  transfer, sender row locked only         the lesson's transfer: crossing transfers deadlock
  handler, a new key per request           the idempotent handler doing real work
  handler, replays of one key              the idempotent handler answering from the store
  outbox drain, 1 and 3 dispatchers        SMS rows sent per second from a full outbox
                                           (FOR UPDATE SKIP LOCKED, batches of 20)

Each workload gets a fresh bank; the invariants are checked after each, and a
broken one fails the command (exit 1).`,
		Example: `  bank-sim bench
  bank-sim bench --duration 10s --clients 16 --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runBench(c.Context(), app, o) },
	}
	c.Flags().DurationVar(&o.duration, "duration", o.duration, "how long each workload runs")
	c.Flags().IntVar(&o.clients, "clients", o.clients, "concurrent clients (goroutines)")
	c.Flags().BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	return c
}

type benchOp func(ctx context.Context, worker, i int) (deadlocks int64, err error)

type workload struct {
	name string
	op   func(db *scenarios.Database) benchOp
}

func runBench(ctx context.Context, app *App, o benchOptions) error {
	if o.duration <= 0 || o.duration > 10*time.Minute {
		return usageError("--duration %v: give a duration from 1ms to 10m", o.duration)
	}
	if o.clients < 1 || o.clients > scenarios.PoolSize*8 {
		return usageError("--clients %d: give 1 to %d", o.clients, scenarios.PoolSize*8)
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	dbs := scenarios.ServerBanks(srv)
	out := app.Env.Stdout
	if !o.asJSON {
		fmt.Fprintf(out, "%s\n%d clients, %v per workload, ₦1 back and forth between Ada and Bola\n\n",
			app.palette().dim.Sprint(srv.Describe()), o.clients, o.duration)
	}

	var results []benchResult
	broken := false
	for _, w := range benchWorkloads() {
		db, err := dbs.NewBank(ctx, "bench")
		if err != nil {
			return err
		}
		res := measure(ctx, w.name, o, w.op(db))
		ledger, lerr := bank.ReadLedger(context.WithoutCancel(ctx), db.Pool)
		db.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if lerr != nil {
			return &ExitError{Code: ExitDatabase, Err: lerr}
		}
		for _, chk := range bank.CheckInvariants(bank.LessonAccounts, ledger, nil) {
			if !chk.OK {
				broken = true
				fmt.Fprintf(app.Env.Stderr, "bank-sim: %s: %s: %s\n", w.name, chk.Name, chk.Detail)
			}
		}
		results = append(results, res)
		if !o.asJSON {
			printBench(app, []benchResult{res}, len(results) == 1)
		}
	}
	for _, n := range []int{1, 3} {
		db, err := dbs.NewBank(ctx, "bench")
		if err != nil {
			return err
		}
		res, err := measureDrain(ctx, db, n, o.duration)
		db.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			broken = true
			fmt.Fprintf(app.Env.Stderr, "bank-sim: %s: %v\n", res.Workload, err)
		}
		results = append(results, res)
		if !o.asJSON {
			printBench(app, []benchResult{res}, false)
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	if broken {
		return errFailed
	}
	return nil
}

func benchWorkloads() []workload {
	transfer := func(flaws bank.Flaws) func(db *scenarios.Database) benchOp {
		return func(db *scenarios.Database) benchOp {
			return func(ctx context.Context, worker, i int) (int64, error) {
				req, user := crossing(worker, i)
				var deadlocks int64
				// The retry loop is bank.InTx's, unrolled here so that the
				// deadlocks it absorbs can be counted.
				for attempt := 1; ; attempt++ {
					err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
						_, err := bank.TransferWith(ctx, tx, user, req, flaws)
						return err
					})
					if !bank.Retryable(err) || attempt == bank.MaxTxAttempts {
						return deadlocks, err
					}
					deadlocks++
				}
			}
		}
	}
	handler := func(replay bool) func(db *scenarios.Database) benchOp {
		return func(db *scenarios.Database) benchOp {
			h := &idem.Handler{DB: db.Pool, Store: &idem.Store{}}
			if replay {
				// Complete the key first, so that every measured request is
				// a replay and none a 409 from racing the first.
				_, _ = h.Handle(context.Background(), idem.Request{UserID: 1, Key: "bench-replayed-key-0001",
					Body: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}.Body()})
			}
			return func(ctx context.Context, worker, i int) (int64, error) {
				req, user := crossing(worker, i)
				key := fmt.Sprintf("bench-%04d-%012d", worker, i)
				if replay {
					req, user, key = bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}, 1, "bench-replayed-key-0001"
				}
				resp, err := h.Handle(ctx, idem.Request{UserID: user, Key: key, Body: req.Body()})
				if err == nil && resp.Status != 201 {
					err = fmt.Errorf("answer %s", resp.Summary())
				}
				return 0, err
			}
		}
	}
	return []workload{
		{"transfer, both rows locked in id order", transfer(bank.Flaws{})},
		{"transfer, sender row locked only (lesson)", transfer(bank.Flaws{SenderLockOnly: true})},
		{"handler, a new key per request", handler(false)},
		{"handler, replays of one key", handler(true)},
	}
}

// crossing alternates directions so that every client's transfers cross
// every other's, the case that deadlocks when only the sender is locked.
func crossing(worker, i int) (bank.TransferRequest, int64) {
	if (worker+i)%2 == 0 {
		return bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}, 1
	}
	return bank.TransferRequest{From: 2, To: 1, AmountKobo: 100}, 2
}

func measure(ctx context.Context, name string, o benchOptions, op benchOp) benchResult {
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var wg sync.WaitGroup
	var deadlocks, errs atomic.Int64
	lat := make([][]time.Duration, o.clients)
	start := time.Now()
	for w := range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				d, err := op(ctx, w, i)
				deadlocks.Add(d)
				if err != nil {
					if ctx.Err() != nil {
						return // time is up; the op was cut short, not failed
					}
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := benchResult{Workload: name, Ops: len(all), PerSecond: float64(len(all)) / elapsed.Seconds(),
		Deadlocks: deadlocks.Load(), Errors: errs.Load()}
	if len(all) > 0 {
		res.P50 = all[len(all)/2]
		res.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return res
}

// printBench prints rows as they are measured, so fixed widths rather than
// a tabwriter that would need every row first.
func printBench(app *App, results []benchResult, header bool) {
	const row = "%-42s %8s %9s %10s %10s %10s %7s\n"
	if header {
		fmt.Fprintf(app.Env.Stdout, row, "workload", "ops", "ops/s", "p50", "p99", "deadlocks", "errors")
	}
	for _, r := range results {
		fmt.Fprintf(app.Env.Stdout, row, r.Workload, fmt.Sprint(r.Ops), fmt.Sprintf("%.0f", r.PerSecond),
			r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), fmt.Sprint(r.Deadlocks), fmt.Sprint(r.Errors))
	}
}

// drainBatch is the dispatchers' batch in the outbox benchmark.
const drainBatch = 20

// measureDrain fills the outbox with more SMS rows than n dispatchers can
// send in d, lets them drain it at once for d, and reports rows sent per
// second, with each row's latency from its claim to its mark. A row sent
// twice or a failed drain is an error: a benchmark that loses correctness
// measures nothing.
func measureDrain(ctx context.Context, db *scenarios.Database, n int, d time.Duration) (benchResult, error) {
	res := benchResult{Workload: fmt.Sprintf("outbox drain, %d dispatcher", n)}
	if n > 1 {
		res.Workload += "s"
	}
	rows := max(1000, int(d.Seconds()*6000))
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (kind, transfer_id, user_id, payload)
		SELECT 'sms', i, 1, 'You sent ₦1 to Bola' FROM generate_series(1, $1) AS i`, rows); err != nil {
		return res, err
	}
	sms := outbox.NewProvider(1)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	var errs atomic.Int64
	lat := make([][]time.Duration, n)
	start := time.Now()
	for w := range n {
		disp := &outbox.Dispatcher{DB: db.Pool, Name: fmt.Sprintf("bench-%d", w+1), SMS: sms, Batch: drainBatch}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b, err := disp.Claim(ctx)
				if err != nil || len(b.Rows) == 0 {
					if err != nil && ctx.Err() == nil {
						errs.Add(1)
					}
					return
				}
				for _, r := range b.Rows {
					t0 := time.Now()
					if _, err := disp.Deliver(ctx, b.Token, r); err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					lat[w] = append(lat[w], time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	res.Ops, res.PerSecond, res.Errors = len(all), float64(len(all))/elapsed.Seconds(), errs.Load()
	if len(all) > 0 {
		res.P50 = all[len(all)/2]
		res.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	perTransfer := map[int64]int{}
	for _, c := range sms.Calls() {
		if perTransfer[c.TransferID]++; perTransfer[c.TransferID] > 1 {
			return res, fmt.Errorf("outbox row for transfer %d sent twice", c.TransferID)
		}
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d failed claims or sends", res.Errors)
	}
	return res, nil
}
