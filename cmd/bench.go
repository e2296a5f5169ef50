package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

type benchOptions struct {
	duration  time.Duration
	clients   string
	hot       int
	accounts  int
	vsPgbench bool
	conns     int
	rounds    int
	http      bool
	only      string
	seed      string
	pgbench   string
	asJSON    bool
	// minOps is the fewest operations a run may count and still print
	// figures.
	minOps int
}

// benchMinOps is the default --min-ops: below it a rate, and a 99th
// percentile above all, are noise.
const benchMinOps = 30

// maxBenchClients bounds --clients: each client is a connection, for
// bank-sim and for pgbench alike.
const maxBenchClients = 64

// benchResult is one row: a workload on a layout with a number of clients,
// measured over --rounds runs. Ops, PerSecond and the latencies are the
// median run's (rates: the median rate); Deadlocks and Errors are counted
// over every run.
type benchResult struct {
	Workload  string        `json:"workload"`
	Layout    benchLayout   `json:"layout"`
	Clients   int           `json:"clients"`
	Ops       int           `json:"ops"`
	PerSecond float64       `json:"perSecond"`
	P50       time.Duration `json:"p50Ns"`
	P99       time.Duration `json:"p99Ns"`
	Deadlocks int64         `json:"deadlocks"`
	Errors    int64         `json:"errors"`
	// TooFew says why the figures mean nothing (a run too short for the
	// workload); they are then not printed, and no ratio is drawn.
	TooFew string     `json:"tooFew,omitempty"`
	Runs   []benchRun `json:"runs"`
	// Pgbench is the same SQL in pgbench, measured in turns with bank-sim
	// (--vs-pgbench), and Ratio is bank-sim's median rate over pgbench's.
	Pgbench *pgbenchResult `json:"pgbench,omitempty"`
	Ratio   float64        `json:"ratio,omitempty"`
}

// benchRun is one run of bank-sim.
type benchRun struct {
	Ops       int           `json:"ops"`
	PerSecond float64       `json:"perSecond"`
	P50       time.Duration `json:"p50Ns"`
	P99       time.Duration `json:"p99Ns"`
	Deadlocks int64         `json:"deadlocks"`
	Errors    int64         `json:"errors"`
}

// pgbenchResult is pgbench's side of a row.
type pgbenchResult struct {
	Transactions int          `json:"transactions"`
	PerSecond    float64      `json:"perSecond"`
	Failed       int          `json:"failed"`
	TooFew       string       `json:"tooFew,omitempty"`
	Runs         []pgbenchRun `json:"runs"`
}

func newBenchCmd(app *App) *cobra.Command {
	o := benchOptions{duration: 3 * time.Second, clients: "16"}
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure transfers per second, against PostgreSQL's own pgbench sending the same SQL",
		Long: `Runs each workload for --duration with each number of --clients (goroutines
sharing one connection pool of --conns connections: by default one per
client, at most 2 per CPU), every client moving ₦1 at a time between two
accounts picked at random: among --hot accounts (2 by default:
every transfer crosses or follows another) and/or spread over --accounts:

  plain               transfer, both rows locked in id order (bank-sim's, pipelined)
  lesson              transfer, sender row locked only: crossing transfers deadlock
  keyed               the idempotent handler, a new key per request (pipelined)
  keyed-unpipelined   the same, one statement at a time, as the lesson's code
  replay              the idempotent handler, replays of one key
  keyed-http, replay-http   the same through the HTTP API (--http)
  outbox              the outbox drained by 1 and 3 dispatchers: SMS rows sent
                      per second (FOR UPDATE SKIP LOCKED, batches of 20); no
                      clients, no layout, no pgbench

With --vs-pgbench each workload's SQL also runs in pgbench (found next to
PostgreSQL's own binaries): the same statements, one round trip each, as
prepared statements, on the same database with as many connections as
clients. bank-sim and pgbench take turns for --rounds rounds (3 by default),
and each row prints both medians and bank-sim/pgbench. A run too short to
count enough operations says so instead of printing figures.

Each layout gets a fresh bank; its invariants are checked after the last
row, and a broken one fails the command (exit 1).`,
		Example: `  bank-sim bench
  bank-sim bench --vs-pgbench --clients 4,16 --hot 2 --accounts 100
  bank-sim bench --vs-pgbench --only keyed,replay --rounds 5 --duration 5s --json
  bank-sim bench --http --only keyed,keyed-http --clients 16`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runBench(c.Context(), app, o) },
	}
	f := c.Flags()
	f.DurationVar(&o.duration, "duration", o.duration, "how long each run lasts (whole seconds with --vs-pgbench)")
	f.StringVar(&o.clients, "clients", o.clients, "concurrent clients, or a list of them: 1,4,16")
	f.IntVar(&o.hot, "hot", 0, "transfers between N hot accounts (default 2 when --accounts is not given)")
	f.IntVar(&o.accounts, "accounts", 0, "transfers spread over N accounts")
	f.BoolVar(&o.vsPgbench, "vs-pgbench", false, "run each workload's SQL in pgbench too, in turns with bank-sim, and print the ratio")
	f.IntVar(&o.conns, "conns", 0, "bank-sim's pool: at most N connections for all its clients (default: clients, at most 2 per CPU)")
	f.IntVar(&o.rounds, "rounds", 0, "runs of each row, bank-sim and pgbench in turns; medians are printed (default 1, 3 with --vs-pgbench)")
	f.BoolVar(&o.http, "http", false, "also run the handler's workloads through the HTTP API on 127.0.0.1")
	f.StringVar(&o.only, "only", "", "run only these workloads (comma-separated names, see above)")
	f.StringVar(&o.seed, "seed", "", "seed for the clients' account picks and pgbench's (printed; default: a new one)")
	f.StringVar(&o.pgbench, "pgbench", "", "the pgbench to run (default: the one next to PostgreSQL's binaries)")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	f.IntVar(&o.minOps, "min-ops", benchMinOps, "the fewest operations a run may count and still print figures (fewer says \"too few\")")
	return c
}

// benchPlan is the validated command line.
type benchPlan struct {
	clients   []int
	layouts   []benchLayout
	workloads []benchWorkload
	rounds    int
	seed      uint64
	// conns sizes bank-sim's pool for n clients.
	conns func(n int) int
	// drain runs the outbox's drain after the transfer workloads.
	drain bool
}

// drainWorkload is the outbox drain's name for --only.
const drainWorkload = "outbox"

func planBench(app *App, o benchOptions) (benchPlan, error) {
	var p benchPlan
	if o.duration < time.Millisecond || o.duration > 10*time.Minute {
		return p, usageError("--duration %v: give a duration from 1ms to 10m", o.duration)
	}
	if o.minOps < 1 {
		return p, usageError("--min-ops %d: give 1 or more operations", o.minOps)
	}
	if o.vsPgbench && (o.duration < time.Second || o.duration%time.Second != 0) {
		return p, usageError("--duration %v: with --vs-pgbench give whole seconds (pgbench -T counts seconds)", o.duration)
	}
	for _, s := range strings.Split(o.clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > maxBenchClients {
			return p, usageError("--clients %s: give 1 to %d clients, or a list of such numbers: 1,4,16", o.clients, maxBenchClients)
		}
		if !slices.Contains(p.clients, n) {
			p.clients = append(p.clients, n)
		}
	}
	for _, l := range []struct {
		flag string
		n    int
		hot  bool
	}{{"--hot", o.hot, true}, {"--accounts", o.accounts, false}} {
		switch {
		case l.n == 0:
		case l.n < 2 || l.n > 100_000:
			return p, usageError("%s %d: give 2 to 100000 accounts (a transfer needs two)", l.flag, l.n)
		default:
			p.layouts = append(p.layouts, benchLayout{Accounts: l.n, Hot: l.hot})
		}
	}
	if len(p.layouts) == 0 {
		p.layouts = []benchLayout{{Accounts: 2, Hot: true}}
	}
	switch {
	case o.conns < 0 || o.conns > maxBenchClients:
		return p, usageError("--conns %d: give 1 to %d connections", o.conns, maxBenchClients)
	case o.conns > 0:
		p.conns = func(n int) int { return min(n, o.conns) }
	default:
		p.conns = func(n int) int { return min(n, 2*runtime.NumCPU()) }
	}
	p.rounds = o.rounds
	switch {
	case p.rounds == 0 && o.vsPgbench:
		p.rounds = 3
	case p.rounds == 0:
		p.rounds = 1
	case p.rounds < 0 || p.rounds > 100:
		return p, usageError("--rounds %d: give 1 to 100", o.rounds)
	}
	all := benchWorkloads()
	if o.only == "" {
		for _, w := range all {
			if !w.http || o.http {
				p.workloads = append(p.workloads, w)
			}
		}
		p.drain = true
	} else {
		for _, name := range strings.Split(o.only, ",") {
			name = strings.TrimSpace(name)
			if name == drainWorkload {
				p.drain = true
				continue
			}
			i := slices.IndexFunc(all, func(w benchWorkload) bool { return w.key == name })
			if i < 0 {
				var names []string
				for _, w := range all {
					names = append(names, w.key)
				}
				names = append(names, drainWorkload)
				return p, usageError("--only: unknown workload %q; valid names: %s", name, strings.Join(names, ", "))
			}
			if !slices.ContainsFunc(p.workloads, func(w benchWorkload) bool { return w.key == name }) {
				p.workloads = append(p.workloads, all[i])
			}
		}
	}
	if o.pgbench != "" && !isExecutable(o.pgbench) {
		return p, usageError("--pgbench %s is not an executable file", o.pgbench)
	}
	seed, err := parseSeed(app, o.seed)
	if err != nil {
		return p, err
	}
	p.seed = seed
	return p, nil
}

func runBench(ctx context.Context, app *App, o benchOptions) error {
	plan, err := planBench(app, o)
	if err != nil {
		return err
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	var pb *pgbench
	if o.vsPgbench {
		if pb, err = findPgbench(ctx, app, o.pgbench, srv.AdminURL()); err != nil {
			return err
		}
	}
	settings, err := serverSettings(ctx, srv.AdminURL())
	if err != nil {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	out, p := app.Env.Stdout, app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · bench · seed %d (repeat with --seed %d)\n", version(), plan.seed, plan.seed)
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("%s; %d CPUs; %s", srv.Describe(), runtime.NumCPU(), settings))
		what := fmt.Sprintf("%v per run", o.duration)
		if plan.rounds > 1 {
			what += fmt.Sprintf(", %d rounds (medians)", plan.rounds)
		}
		if pb != nil {
			what += fmt.Sprintf("; in turns with %s -M prepared: the same statements, one round trip each", pb.path)
		}
		fmt.Fprintf(out, "%s\n", what)
	}

	b := &bencher{app: app, srv: srv, plan: plan, o: o, pgbench: pb}
	var results []benchResult
	broken := false
	for _, layout := range plan.layouts {
		rows, ok, err := b.layout(ctx, layout)
		results = append(results, rows...)
		if err != nil {
			return err
		}
		broken = broken || !ok
	}
	for _, n := range []int{1, 3} {
		if !plan.drain {
			break
		}
		db, err := banks.OnServer(srv, banks.Options{}).NewBank(ctx, "bench")
		if err != nil {
			return &ExitError{Code: ExitDatabase, Err: err}
		}
		res, err := measureDrain(ctx, db, n, o.duration)
		db.Close()
		if res.Ops < o.minOps {
			res.TooFew = tooFew(res.Ops, o.duration)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			broken = true
			fmt.Fprintf(app.Env.Stderr, "bank-sim: %s: %v\n", res.Workload, err)
		}
		results = append(results, res)
		if !o.asJSON {
			if n == 1 {
				fmt.Fprintf(out, "\n%s\n", p.head.Sprint("the outbox, full, drained by its dispatchers"))
			}
			printBench(app, []benchResult{res}, n == 1)
		}
	}
	if o.asJSON {
		doc := benchReport{Version: version(), Seed: strconv.FormatUint(plan.seed, 10), Server: srv.Describe(), Settings: settings,
			CPUs: runtime.NumCPU(), DurationNs: o.duration, Rounds: plan.rounds, Results: results}
		if pb != nil {
			doc.Pgbench = pb.path
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	}
	if broken {
		return errFailed
	}
	return nil
}

// benchReport is what --json prints: the run's settings and every row.
type benchReport struct {
	Version string `json:"version"`
	// Seed is a string: a JSON number loses a uint64's last digits in most
	// readers.
	Seed       string        `json:"seed"`
	Server     string        `json:"server"`
	Settings   string        `json:"settings"`
	CPUs       int           `json:"cpus"`
	DurationNs time.Duration `json:"durationNs"`
	Rounds     int           `json:"rounds"`
	Pgbench    string        `json:"pgbench,omitempty"`
	Results    []benchResult `json:"results"`
}

// serverSettings are the server's settings that decide what a commit costs,
// printed with the figures: with fsync off (bank-sim's embedded server) a
// commit waits for no disk, and round trips and CPU are what is measured.
func serverSettings(ctx context.Context, url string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var fsync, sync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &sync); err != nil {
		return "", fmt.Errorf("read the server's settings: %w", err)
	}
	return fmt.Sprintf("fsync %s, synchronous_commit %s", fsync, sync), nil
}

// bencher runs the rows of one bench command.
type bencher struct {
	app     *App
	srv     *postgres.Server
	plan    benchPlan
	o       benchOptions
	pgbench *pgbench
	runs    int // runs so far: each has its own keys and random draws
}

// layout measures every row on one fresh bank of l's accounts, then checks
// the bank's invariants (ok false, and said on stderr, if one broke).
func (b *bencher) layout(ctx context.Context, l benchLayout) (results []benchResult, ok bool, err error) {
	db, err := b.srv.CreateDatabase(ctx, banks.Template, "bench")
	if err != nil {
		return nil, false, &ExitError{Code: ExitDatabase, Err: err}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = db.Drop(dctx)
	}()
	opening := benchAccounts(l)
	setup, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		return nil, false, &ExitError{Code: ExitDatabase, Err: err}
	}
	defer setup.Close()
	if err := openBenchAccounts(ctx, setup, l); err != nil {
		return nil, false, &ExitError{Code: ExitDatabase, Err: err}
	}
	// The replay workloads' key, completed before any run.
	h := &idem.Handler{DB: setup, Store: &idem.Store{}}
	if resp, err := h.Handle(ctx, idem.Request{UserID: replayUser, Key: replayKey, Body: replayBody()}); err != nil || resp.Status != 201 {
		return nil, false, &ExitError{Code: ExitFailed, Err: fmt.Errorf("complete the replays' key: %s %v", resp.Summary(), err)}
	}

	for _, clients := range b.plan.clients {
		if !b.o.asJSON {
			pools := fmt.Sprintf("(bank-sim: a pool of %d)", b.plan.conns(clients))
			if b.pgbench != nil {
				pools = fmt.Sprintf("(bank-sim: a pool of %d; pgbench: %d %s)", b.plan.conns(clients), clients, plural(clients, "connection", "connections"))
			}
			fmt.Fprintf(b.app.Env.Stdout, "\n%s %s\n", b.app.palette().head.Sprintf("%s, %d %s", l, clients, plural(clients, "client", "clients")),
				b.app.palette().dim.Sprint(pools))
		}
		rows, err := b.clients(ctx, db.URL, l, clients)
		results = append(results, rows...)
		if err != nil {
			return results, false, err
		}
	}

	ledger, err := bank.ReadLedger(context.WithoutCancel(ctx), setup)
	if ctx.Err() != nil {
		return results, false, ctx.Err()
	}
	if err != nil {
		return results, false, &ExitError{Code: ExitDatabase, Err: err}
	}
	ok = true
	for _, chk := range bank.CheckInvariants(opening, ledger, nil) {
		if !chk.OK {
			ok = false
			fmt.Fprintf(b.app.Env.Stderr, "bank-sim: bench on %s: %s: %s\n", l, chk.Name, chk.Detail)
		}
	}
	return results, ok, nil
}

// openBenchAccounts empties the bank and opens l's accounts.
func openBenchAccounts(ctx context.Context, pool *pgxpool.Pool, l benchLayout) error {
	_, err := pool.Exec(ctx, `
		DELETE FROM idempotency_keys; DELETE FROM transfers; DELETE FROM accounts;
		INSERT INTO accounts (id, owner_id, holder, status, balance_kobo)
		SELECT i, i, 'Account ' || i, 'active', `+strconv.Itoa(benchOpening)+` FROM generate_series(1, `+strconv.Itoa(l.Accounts)+`) AS i`)
	if err != nil {
		return fmt.Errorf("open the bench's accounts: %w", err)
	}
	return nil
}

// clients measures every workload with n clients: a pool of n connections
// (and, for the HTTP workloads, an API server on 127.0.0.1 in front of it).
func (b *bencher) clients(ctx context.Context, url string, l benchLayout, n int) ([]benchResult, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &ExitError{Code: ExitDatabase, Err: err}
	}
	cfg.MaxConns = int32(b.plan.conns(n))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &ExitError{Code: ExitDatabase, Err: err}
	}
	defer pool.Close()
	// Every connection open before the first run, as pgbench's are (its
	// rate leaves out the time it took to connect).
	conns := make([]*pgxpool.Conn, cfg.MaxConns)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return nil, &ExitError{Code: ExitDatabase, Err: err}
		}
	}
	for _, c := range conns {
		c.Release()
	}

	t := &benchTarget{pool: pool, layout: l}
	if slices.ContainsFunc(b.plan.workloads, func(w benchWorkload) bool { return w.http }) {
		stop, err := serveBench(t, n)
		if err != nil {
			return nil, &ExitError{Code: ExitFailed, Err: err}
		}
		defer stop()
	}

	var results []benchResult
	for _, w := range b.plan.workloads {
		res := benchResult{Workload: w.name, Layout: l, Clients: n}
		var pgRuns []pgbenchRun
		for round := range b.plan.rounds {
			// Who goes first alternates, so that neither always runs on the
			// other's leftovers (dead rows, a warmer cache).
			pgFirst := round%2 == 1
			for _, pg := range []bool{pgFirst, !pgFirst} {
				b.runs++
				if pg {
					if b.pgbench == nil {
						continue
					}
					r, err := b.pgbench.run(ctx, url, w.pgbench(l), n, b.o.duration, b.plan.seed+uint64(b.runs))
					if err != nil {
						return results, &ExitError{Code: ExitFailed, Err: err}
					}
					pgRuns = append(pgRuns, r)
					continue
				}
				t.run = b.runs
				res.Runs = append(res.Runs, measure(ctx, b.o.duration, n, b.plan.seed+uint64(b.runs), w.op(t)))
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
		summarize(&res, pgRuns, b.pgbench != nil, b.o.duration, b.o.minOps)
		results = append(results, res)
		if !b.o.asJSON {
			printBench(b.app, []benchResult{res}, len(results) == 1)
		}
	}
	return results, nil
}

// serveBench puts the bench's API in front of t's pool on 127.0.0.1, with
// a client that keeps n connections alive, as busy clients do.
func serveBench(t *benchTarget, n int) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	h := &idem.Handler{DB: t.pool, Store: &idem.Store{}}
	hs := &http.Server{Handler: api.NewServer(api.Config{Handler: h, Tokens: benchTokens(t.layout)}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = api.Serve(hs, ln) }()
	t.http = "http://" + ln.Addr().String()
	tr := &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n}
	t.hc = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

// measure runs op on n workers for d and counts what finished within d.
// Worker w draws from its own source, seeded by (seed, w).
func measure(ctx context.Context, d time.Duration, n int, seed uint64, op benchOp) benchRun {
	var deadlocks, errs atomic.Int64
	ctx = bank.WithTxRetry(ctx, func(error) { deadlocks.Add(1) })
	start := time.Now()
	deadline := start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				err := op(ctx, w, i, r)
				if time.Now().After(deadline) {
					return // finished after the end: not counted either way
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	run := benchRun{Ops: len(all), PerSecond: float64(len(all)) / d.Seconds(), Deadlocks: deadlocks.Load(), Errors: errs.Load()}
	if len(all) > 0 {
		run.P50 = all[len(all)/2]
		run.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return run
}

// summarize fills res's medians, pgbench's, and the ratio between them.
func summarize(res *benchResult, pgRuns []pgbenchRun, vs bool, d time.Duration, minOps int) {
	byRate := slices.Clone(res.Runs)
	slices.SortFunc(byRate, func(a, b benchRun) int { return cmpFloat(a.PerSecond, b.PerSecond) })
	mid := byRate[len(byRate)/2]
	res.Ops, res.PerSecond, res.P50, res.P99 = mid.Ops, median(res.Runs, func(r benchRun) float64 { return r.PerSecond }), mid.P50, mid.P99
	fewest := res.Runs[0].Ops
	for _, r := range res.Runs {
		res.Deadlocks += r.Deadlocks
		res.Errors += r.Errors
		fewest = min(fewest, r.Ops)
	}
	if fewest < minOps {
		res.TooFew = tooFew(fewest, d)
	}
	if !vs {
		return
	}
	pg := &pgbenchResult{Runs: pgRuns, PerSecond: median(pgRuns, func(r pgbenchRun) float64 { return r.PerSecond })}
	fewest = pgRuns[0].Transactions
	for _, r := range pgRuns {
		pg.Failed += r.Failed
		fewest = min(fewest, r.Transactions)
	}
	byTPS := slices.Clone(pgRuns)
	slices.SortFunc(byTPS, func(a, b pgbenchRun) int { return cmpFloat(a.PerSecond, b.PerSecond) })
	pg.Transactions = byTPS[len(byTPS)/2].Transactions
	if fewest < minOps {
		pg.TooFew = tooFew(fewest, d)
	}
	res.Pgbench = pg
	if res.TooFew == "" && pg.TooFew == "" && pg.PerSecond > 0 {
		res.Ratio = res.PerSecond / pg.PerSecond
	}
}

func tooFew(ops int, d time.Duration) string {
	return fmt.Sprintf("%d done in %v: too few to mean anything; run longer (--duration)", ops, d)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// median is the middle value of f over xs (the mean of the two middle ones
// for an even count).
func median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// printBench prints rows as they are measured, so fixed widths rather than
// a tabwriter that would need every row first. The pgbench columns appear
// only in a run that has them.
func printBench(app *App, results []benchResult, header bool) {
	out, p := app.Env.Stdout, app.palette()
	vs := len(results) > 0 && results[0].Pgbench != nil
	row := func(cols ...string) {
		fmt.Fprintf(out, "%-56s %9s %9s %9s %10s %7s", cols[0], cols[1], cols[2], cols[3], cols[4], cols[5])
		if vs {
			fmt.Fprintf(out, " %10s %9s", cols[6], cols[7])
		}
		fmt.Fprintln(out)
	}
	if header {
		row("workload", "ops/s", "p50", "p99", "deadlocks", "errors", "pgbench/s", "ratio")
	}
	for _, r := range results {
		if r.TooFew != "" {
			fmt.Fprintf(out, "%-56s %s\n", r.Workload, p.warn.Sprint(r.TooFew))
			continue
		}
		pg, ratio := "", ""
		if r.Pgbench != nil && r.Pgbench.TooFew == "" {
			pg, ratio = fmt.Sprintf("%.0f", r.Pgbench.PerSecond), fmt.Sprintf("%.2f×", r.Ratio)
		} else if r.Pgbench != nil {
			pg = "too few"
		}
		row(r.Workload, fmt.Sprintf("%.0f", r.PerSecond), r.P50.Round(10*time.Microsecond).String(), r.P99.Round(10*time.Microsecond).String(),
			fmt.Sprint(r.Deadlocks), fmt.Sprint(r.Errors), pg, ratio)
		if r.Pgbench != nil && r.Pgbench.TooFew != "" {
			fmt.Fprintf(out, "%-56s %s\n", "", p.warn.Sprint("pgbench: "+r.Pgbench.TooFew))
		}
	}
}

// drainBatch is the dispatchers' batch in the outbox benchmark.
const drainBatch = 20

// measureDrain fills the outbox with more SMS rows than n dispatchers can
// send in d, lets them drain it at once for d, and reports rows sent per
// second, with each row's latency from its claim to its mark. A row sent
// twice or a failed drain is an error: a benchmark that loses correctness
// measures nothing.
func measureDrain(ctx context.Context, db *banks.Database, n int, d time.Duration) (benchResult, error) {
	res := benchResult{Workload: fmt.Sprintf("outbox drain, %d dispatcher", n), Clients: n}
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
