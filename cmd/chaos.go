package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
)

type chaosOptions struct {
	seed        string
	clients     int
	intents     int
	duration    time.Duration
	accounts    int
	faults      string
	bug         string
	history     string
	instances   int
	maxAttempts int
	asJSON      bool
	http        bool
	kill        bool
}

func newChaosCmd(app *App) *cobra.Command {
	var o chaosOptions
	c := &cobra.Command{
		Use:   "chaos",
		Short: "Run many concurrent clients under seeded random faults and check the history",
		Long: `Run C concurrent clients, each a goroutine with its own intents, against the
transfer handler on a real PostgreSQL pool, through a network that fails at
random: lost responses, dropped requests, duplicate copies, servers that go
silent after claiming a key, transactions that fail just before COMMIT,
requests that arrive after the client gave up, slow servers, clock jumps
that expire locks, deadlocks with another transaction, locks that expire
while their holder is still writing, clients that go away mid-request, and
accounts frozen while a transfer from them is between its checks and its
debit.
Requests land on one of several copies of the server, whose own clocks
disagree.

The bank has no coincidences (account ids are not their owners' user ids,
users own two accounts, frozen and closed accounts hold money), and the
workload reaches every defence at its edges: another user's account,
inactive senders and recipients, exactly the balance and a kobo more, buggy
clients reusing a key with another recipient, sender or amount, two users
with the same key text, and intents sent again after their final answer and
after the cleanup job ran.

With --http the same seeded intents travel over real sockets: each copy of
the server is the HTTP API on 127.0.0.1, behind a fault proxy that fails the
connection (drops it after the commit, resets it, duplicates the request,
delivers it late, slows it, resets or half-closes it after the request), and
each client is the lesson's retrying client (api/client). Healing asks GET
/transfers?key= for each unknown intent and sends it again with the same key
when the server never saw it.

With --kill-postgres the PostgreSQL server is killed with SIGKILL once, at a
moment the seed picks, and started again on the same data while the clients
run. Only for the PostgreSQL that bank-sim starts itself, not one at
--database-url.

Every intent is recorded: its key, each attempt, what the client saw. An
auditor reads every balance in one snapshot while clients run. Before
healing, the keys in progress are counted against the holders still alive.
Healing stops the faults, moves the clock past every lock, retries every
unknown intent with its own key, and wakes the silent servers; then the
cleanup job runs and some intents are sent once more. The checker verifies
the history (money, answers against the lesson's rules, replays byte for
byte, keys) and counts the defence paths the run took and the faults that
fired.

Every random choice comes from --seed: the same seed gives the same intents
and the same fault on every attempt. Exit code 0 when the run is VALID (no
rule broken, every defence exercised), 1 on any violation, 4 when it is
INCONCLUSIVE (no rule broken, but some defence never exercised or some fault
never fired), 2 for a usage error, 3 when PostgreSQL is unavailable.`,
		Example: `  bank-sim chaos --seed 42
  bank-sim chaos --clients 16 --intents 10000 --accounts 3
  bank-sim chaos --duration 30s --faults lose-response=0.2,duplicate=0.1
  bank-sim chaos --http --clients 8 --intents 2000
  bank-sim chaos --kill-postgres --intents 2000
  bank-sim chaos --bug no-fencing --history run.json   then: bank-sim check run.json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runChaos(c, app, o) },
	}
	f := c.Flags()
	f.StringVar(&o.seed, "seed", "", "seed for every random choice (printed on each run; default: a new one)")
	f.IntVar(&o.clients, "clients", 8, "concurrent clients, each a goroutine on the pool")
	f.IntVar(&o.intents, "intents", 0, "how many intents to run (default 1000, unless --duration)")
	f.DurationVar(&o.duration, "duration", 0, "start new intents until this much time has passed, instead of --intents")
	f.IntVar(&o.accounts, "accounts", 5, "how many active accounts the intents move money between, two per user: a few make them hot, many spread the load (a frozen, a closed and up to four solo accounts come on top)")
	f.StringVar(&o.faults, "faults", "default", "which faults at what rate per attempt: default, none, or kind=rate,… (kinds: "+strings.Join(chaos.FaultKinds(), ", ")+")")
	f.StringVar(&o.bug, "bug", "", "run with one of the lesson's mistakes (see 'bank-sim list --bugs')")
	f.StringVar(&o.history, "history", "", "write the history as JSON to `FILE` (re-check it with 'bank-sim check FILE')")
	f.IntVar(&o.instances, "servers", 3, "copies of the server behind the load balancer")
	f.IntVar(&o.maxAttempts, "attempts", 4, "attempts per intent before it is left to healing")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&o.http, "http", false, "send every attempt over real HTTP: API servers on 127.0.0.1, fault proxies, the retrying client")
	f.BoolVar(&o.kill, "kill-postgres", false, "kill PostgreSQL with SIGKILL once during the run and restart it on the same data")
	_ = c.RegisterFlagCompletionFunc("bug", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return idem.BugNames(), cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

func parseBug(name string) (*idem.Bug, error) {
	if name == "" {
		return nil, nil
	}
	b, err := idem.LookupBug(name)
	if err != nil {
		return nil, usageError("--bug: %v", err)
	}
	return &b, nil
}

func (o chaosOptions) config(app *App, c *cobra.Command) (chaos.Config, error) {
	seed, err := seedFlag(app, c, o.seed)
	if err != nil {
		return chaos.Config{}, err
	}
	switch {
	case c.Flags().Changed("intents") && o.intents == 0:
		return chaos.Config{}, usageError("--intents 0: give a positive number (leave the flag out for 1000)")
	case o.clients < 1 || o.clients > 256:
		return chaos.Config{}, usageError("--clients %d: give 1 to 256", o.clients)
	case o.intents < 0:
		return chaos.Config{}, usageError("--intents %d: give a positive number", o.intents)
	case o.intents > 0 && o.duration > 0:
		return chaos.Config{}, usageError("give --intents or --duration, not both")
	case o.duration < 0:
		return chaos.Config{}, usageError("--duration %s: give a positive duration", o.duration)
	case o.accounts < 2 || o.accounts > 10_000:
		return chaos.Config{}, usageError("--accounts %d: give 2 to 10000", o.accounts)
	case o.instances < 1 || o.instances > 64:
		return chaos.Config{}, usageError("--servers %d: give 1 to 64", o.instances)
	case o.maxAttempts < 1 || o.maxAttempts > 100:
		return chaos.Config{}, usageError("--attempts %d: give 1 to 100", o.maxAttempts)
	}
	rates, err := chaos.ParseRates(o.faults)
	if err != nil {
		return chaos.Config{}, usageError("--faults: %v", err)
	}
	bug, err := parseBug(o.bug)
	if err != nil {
		return chaos.Config{}, err
	}
	if o.kill && app.externalURL() != "" {
		return chaos.Config{}, usageError("--kill-postgres kills the PostgreSQL that bank-sim starts itself; it cannot kill the server at --database-url / DATABASE_URL")
	}
	if o.history != "" {
		if err := checkWritableFlag("--history", o.history); err != nil {
			return chaos.Config{}, err
		}
	}
	return chaos.Config{Seed: seed, Clients: o.clients, Intents: o.intents, Duration: o.duration,
		Accounts: o.accounts, Faults: rates, Instances: o.instances, MaxAttempts: o.maxAttempts, Bug: bug, HTTP: o.http, KillPostgres: o.kill}.WithDefaults(), nil
}

func runChaos(c *cobra.Command, app *App, o chaosOptions) error {
	cfg, err := o.config(app, c)
	if err != nil {
		return err
	}
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · chaos · seed %d (repeat this run with --seed %d)\n", version(), cfg.Seed, cfg.Seed)
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	if !o.asJSON {
		printWrapped(out, app.describe(srv), app.Env.Width, p.dim)
		fmt.Fprintf(out, "%s\n", describeConfig(cfg))
	}
	bar := newProgress(app, "intents settled", "bank-sim chaos:", o.asJSON)
	opts := chaos.Options{Progress: bar.update}
	if cfg.KillPostgres {
		if !srv.Embedded() {
			return usageError("--kill-postgres kills the PostgreSQL that bank-sim starts itself; it cannot kill %s", srv.Describe())
		}
		opts.CrashPostgres = srv.Crash
	}
	h, err := chaos.RunOnWith(ctx, scenarios.ServerBanks(srv), cfg, opts)
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return runFailed(fmt.Errorf("chaos run (seed %d): %w", cfg.Seed, err))
	}
	// The verdict first: a history that cannot be written must not cost it.
	var saveErr error
	if o.history != "" {
		saveErr = h.Save(o.history)
	}
	res := chaos.Check(h)
	if o.asJSON {
		if err := writeJSON(out, newChaosJSON(cfg.Seed, res)); err != nil {
			return err
		}
	} else {
		printChaosResult(out, p, h, res)
		if o.history != "" && saveErr == nil {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("history written to %s (re-check it with: bank-sim check %s)", o.history, o.history))
		}
	}
	if saveErr != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("--history %s: cannot write it (%s)", o.history, plainIOError(saveErr))}
	}
	return verdictError(res)
}

// verdictError is the exit a verdict gives: 0 VALID, 1 INVALID, 4
// INCONCLUSIVE. The report has already said why.
func verdictError(res chaos.Result) error {
	switch res.Verdict() {
	case chaos.Invalid:
		return errFailed
	case chaos.Inconclusive:
		return errInconclusive
	}
	return nil
}

var errInconclusive = &ExitError{Code: ExitInconclusive, Err: errors.New("")}

// runFailed is the exit for a run that could not finish: 3 when PostgreSQL
// could not be reached, 1 for anything else (which the message names).
func runFailed(err error) error {
	var connect *pgconn.ConnectError
	var netErr net.Error
	if errors.Is(err, postgres.ErrUnavailable) || errors.As(err, &connect) || errors.As(err, &netErr) {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	return &ExitError{Code: ExitFailed, Err: err}
}

type chaosJSON struct {
	Seed    uint64 `json:"seed"`
	Verdict string `json:"verdict"`
	Valid   bool   `json:"valid"`
	// Missing lists the defences never exercised and the faults that never
	// fired (why a run is INCONCLUSIVE).
	Missing []string     `json:"missing"`
	Result  chaos.Result `json:"result"`
}

func newChaosJSON(seed uint64, res chaos.Result) chaosJSON {
	return chaosJSON{Seed: seed, Verdict: res.Verdict(), Valid: res.Verdict() == chaos.Valid,
		Missing: append([]string{}, res.Coverage.Missing()...), Result: res}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func describeConfig(cfg chaos.Config) string {
	what := fmt.Sprintf("%d intents", cfg.Intents)
	if cfg.Intents <= 0 {
		what = "intents for " + cfg.Duration.String()
	}
	bug := "none (the correct handler)"
	if cfg.Bug != nil {
		bug = cfg.Bug.Name
	}
	via := "in process"
	if cfg.HTTP {
		via = "over HTTP"
	}
	faults := cfg.Faults.String()
	if cfg.KillPostgres {
		faults += " · PostgreSQL killed (SIGKILL) once and restarted"
	}
	return fmt.Sprintf("%d clients · %s · %d accounts · %d servers %s · up to %d attempts\nfaults: %s\nbug: %s",
		cfg.Clients, what, cfg.Accounts, cfg.Instances, via, cfg.MaxAttempts, faults, bug)
}

// printChaosResult prints the summary table, the checks, and the first and
// worst violation with the timeline of the intent involved.
func printChaosResult(out io.Writer, p *palette, h *chaos.History, res chaos.Result) {
	s := res.Stats
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "intents\t%d\t(%d ok, %d rejected, %d unknown after the fault phase → %d resolved by healing)\n",
		s.Intents, s.OK, s.Rejected, s.Healed, s.Resolved)
	fmt.Fprintf(tw, "attempts\t%d\t(%d replays, %d × 409, %d × 5xx)\n", s.Attempts, s.Replays, s.Conflicts, s.ServerErrors)
	for _, c := range s.Crashes {
		after := "on a timer"
		if c.AfterIntent >= 0 {
			after = fmt.Sprintf("as intent %d started", c.AfterIntent)
		}
		if c.Error != "" {
			fmt.Fprintf(tw, "postgres\tkilled with SIGKILL %s, at %s; restart failed: %s\n", after, time.Duration(c.AtNs).Round(time.Millisecond), c.Error)
			continue
		}
		fmt.Fprintf(tw, "postgres\tkilled with SIGKILL %s, at %s; back on the same data after %s\n", after,
			time.Duration(c.AtNs).Round(time.Millisecond), time.Duration(c.UpNs-c.AtNs).Round(time.Millisecond))
	}
	fmt.Fprintf(tw, "ledger\t%d transfers\t%d audits\n", s.Transfers, s.Audits)
	for i, st := range h.Stalls {
		if i == 3 {
			fmt.Fprintf(tw, "stalled\t… and %d more staged races that did not happen\n", len(h.Stalls)-3)
			break
		}
		fmt.Fprintf(tw, "stalled\t%s\n", st)
	}
	transfersPerSecond := 0.0
	if s.Duration > 0 {
		transfersPerSecond = float64(s.Transfers) / s.Duration.Seconds()
	}
	fmt.Fprintf(tw, "speed\t%.0f intents/s\t%.0f transfers/s (%s)\n", s.IntentsPerSecond, transfersPerSecond, s.Duration.Round(time.Millisecond))
	_ = tw.Flush()

	printCoverage(out, p, res.Coverage)

	fmt.Fprintln(out)
	for _, c := range res.Checks {
		if c.Violations == 0 {
			fmt.Fprintf(out, "   %s %s\n", p.ok.Sprint("✓"), checkTitle(c.Kind))
		} else {
			fmt.Fprintf(out, "   %s %s: %d violation(s)\n", p.bad.Sprint("✗"), p.bad.Sprint(checkTitle(c.Kind)), c.Violations)
		}
	}
	switch res.Verdict() {
	case chaos.Valid:
		fmt.Fprintf(out, "\n%s %s\n", p.ok.Sprint("VALID"), p.dim.Sprintf("seed %d", h.Seed))
		return
	case chaos.Inconclusive:
		fmt.Fprintf(out, "\n%s no rule broken, but this run cannot vouch for what it never exercised:\n", p.bad.Sprint("INCONCLUSIVE"))
		for _, m := range res.Coverage.Missing() {
			fmt.Fprintf(out, "   - %s\n", m)
		}
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("seed %d; more intents (--intents) or the default faults reach every defence", h.Seed))
		return
	}
	show := func(label string, v *chaos.Violation) {
		fmt.Fprintf(out, "\n%s %s %s\n", p.bad.Sprint(label+":"), p.bold.Sprint(v.Kind), v.Detail)
		for _, line := range chaos.Timeline(h, v.Intent) {
			fmt.Fprintf(out, "   %s\n", line)
		}
	}
	show("first violation", res.First)
	if res.Worst != res.First {
		show("worst violation", res.Worst)
	}
	fmt.Fprintf(out, "\n%s %d violation(s) · seed %d (repeat with --seed %d)\n", p.bad.Sprint("INVALID"), len(res.Violations), h.Seed, h.Seed)
}

// printCoverage prints how often each defence path was taken and each fault
// fired; what never happened is marked.
func printCoverage(out io.Writer, p *palette, c chaos.Coverage) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "defence path\ttaken\t\n")
	for _, pc := range c.Paths {
		if pc.Count == 0 {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", pc.Path, p.bad.Sprint("0"), p.bad.Sprintf("NOT REACHED (reached by: %s)", pc.ReachedBy))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", pc.Path, pc.Count, p.dim.Sprint(pc.What))
	}
	fmt.Fprintf(tw, "fault\tfired\t\n")
	for _, f := range c.Faults {
		switch {
		case f.Rate > 0 && f.Fired == 0:
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Kind, p.bad.Sprint("0"), p.bad.Sprintf("NEVER FIRED (rate %g)", f.Rate))
		case f.Rate > 0:
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", f.Kind, f.Fired, p.dim.Sprintf("rate %g", f.Rate))
		default:
			fmt.Fprintf(tw, "  %s\t-\t%s\n", f.Kind, p.dim.Sprint("off"))
		}
	}
	_ = tw.Flush()
}

func checkTitle(kind string) string {
	if inv, ok := chaos.SideEffectInvariant(kind); ok {
		return inv
	}
	switch kind {
	case chaos.KindTotal:
		return "total money conserved at every audit and at the end"
	case chaos.KindNegative:
		return "no negative balance"
	case chaos.KindTwice:
		return "no intent moved money more than once"
	case chaos.KindAckMissing:
		return "every acknowledged transfer exists, once, as asked"
	case chaos.KindRejected:
		return "no refused intent moved money"
	case chaos.KindWrong:
		return "every final answer is one the lesson's rules allow for that request"
	case chaos.KindFrozen:
		return "no account frozen under a transfer was debited by it"
	case chaos.KindReplay:
		return "every later answer to a key is its first, replayed byte for byte"
	case chaos.KindAbandoned:
		return "no key in progress without a live holder before healing"
	case chaos.KindStuckKey:
		return "no key left in progress at the end"
	case chaos.KindUnresolved:
		return "every intent settled after healing"
	case chaos.KindLedger:
		return "each balance is opening + credits − debits"
	case chaos.KindKeyLost:
		return "every key that gave a final answer is still completed at the end"
	}
	return kind
}

// progressBar shows how far a long run has got. On a terminal it redraws
// one line; otherwise (stdout piped, or --json) it prints a line to stderr
// every few seconds, so that a piped run is not silent for its whole length.
type progressBar struct {
	out   io.Writer
	noun  string // what is counted: "intents", "runs"
	lines bool   // a line every `every` instead of a redrawn one
	every time.Duration
	label string // the start of each line: "bank-sim chaos:"
	mu    sync.Mutex
	last  int
	drawn bool
	shown time.Time
}

// newProgress is the progress display for app: a bar on a terminal, lines
// on stderr otherwise (and always under --json, whose stdout is data).
func newProgress(app *App, noun, label string, asJSON bool) *progressBar {
	if app.Env.Terminal && !asJSON {
		return &progressBar{out: app.Env.Stdout, noun: noun}
	}
	return &progressBar{out: app.Env.Stderr, noun: noun, lines: true, every: 2 * time.Second, label: label}
}

func (b *progressBar) update(done, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines {
		if time.Since(b.shown) < b.every && (total <= 0 || done < total) {
			return
		}
		if b.shown.IsZero() {
			// The first line only after a first interval: a short run
			// prints none.
			b.shown = time.Now()
			return
		}
		b.shown = time.Now()
		if total > 0 {
			fmt.Fprintf(b.out, "%s %d/%d %s (%d%%)\n", b.label, done, total, b.noun, done*100/total)
		} else {
			fmt.Fprintf(b.out, "%s %d %s so far\n", b.label, done, b.noun)
		}
		return
	}
	const width = 30
	if total <= 0 {
		if done-b.last < 50 && b.drawn {
			return
		}
		b.last, b.drawn = done, true
		fmt.Fprintf(b.out, "\r  %d %s", done, b.noun)
		return
	}
	pct := done * 100 / total
	if pct == b.last && b.drawn {
		return
	}
	b.last, b.drawn = pct, true
	filled := done * width / total
	fmt.Fprintf(b.out, "\r  [%s%s] %3d%% %d/%d %s", strings.Repeat("█", filled), strings.Repeat("·", width-filled), pct, done, total, b.noun)
}

func (b *progressBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintf(b.out, "\r%s\r", strings.Repeat(" ", 60))
		b.drawn = false
	}
}
