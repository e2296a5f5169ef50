package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/internal/termtext"
	"github.com/banksim/bank-sim/probe"
	"github.com/spf13/cobra"
)

type probeOptions struct {
	targetFlags
	amount          string
	copies, drain   int
	hangUps         int
	timeout, settle time.Duration
	only, skip      []string
	seed            string
	asJSON          bool
	strict          bool
	noRestore       bool
	html            string
	closedAccount   string
	reopen          string
}

func newProbeCmd(app *App) *cobra.Command {
	var o probeOptions
	c := &cobra.Command{
		Use:   "probe URL [URL...]",
		Short: "Tell the lesson's failure stories to your own transfer API, and say where it loses or doubles money",
		Long: `Probe any HTTP server that implements the lesson's transfer contract — your
server.js, a team's staging service, bank-sim serve — from the outside: a
lost response, a retry with the same key, a double tap and a duplicate storm
(copies released together behind a barrier), a key reused for another amount
or recipient, another user with the same key, no key, no token, a client that
hangs up mid-request, and a concurrent drain of one account. Network faults
go through bank-sim's fault proxy in front of the target. Each check says
PASS, FAIL, UNKNOWN (what the target exposes cannot decide it) or SKIPPED,
with the requests, the answers and what they prove.

Money is checked from what the answers reveal (transfer ids, the sender's
balance in each answer), or exactly, before and after each check, with
--balances-url (a GET per account, as its owner) or --database-url with
--balances-sql (a read-only query of the target's own database).

Give several URLs for copies of one service that share a database: retries
then also land on another copy, as behind a load balancer.

The probe moves real money between the accounts it is given: it says how
much before it starts, sends the net amount back at the end, refuses a
target off this machine unless --allow-remote, and --dry-run prints the
plan without sending anything. Run it against accounts nothing else uses
meanwhile. Keys, jitter and hang-up moments come from --seed.

Exit code 0 when no check failed, 1 when one did (or, with --strict, when
one could not be made), 2 for a usage error or a target that does not speak
the contract (another path, other field names, a token it refuses), 3 when
the target cannot be reached or is not the transfer API at all: not an HTTP
server, or a web page where the API should answer.

--html FILE also writes the report as one self-contained HTML page: every
check's verdict at a glance (failures first), each distinct warning once
with the checks it applies to, the evidence folded where it is long; it
opens offline and prints.`,
		Example: `  bank-sim probe http://127.0.0.1:8080
  bank-sim probe http://127.0.0.1:3000 --token ada=s3cret --token bola=t0ken --account ada=17 --account bola=18 --account chidi=19
  bank-sim probe http://127.0.0.1:8080 --balances-url 'http://127.0.0.1:8080/accounts/{id}'
  bank-sim probe http://127.0.0.1:8080 --database-url postgres://app@127.0.0.1/bank --balances-sql 'SELECT id, balance_kobo FROM accounts'
  bank-sim probe http://127.0.0.1:8081 http://127.0.0.1:8082       two copies of one service
  bank-sim probe http://127.0.0.1:9000 --path /v1/payments --amount-field amount --id-field payment.id --balance-field ''
  bank-sim probe http://127.0.0.1:8080 --dry-run
  bank-sim probe http://127.0.0.1:8080 --html probe.html`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error { return runProbe(c.Context(), app, o, args) },
	}
	f := c.Flags()
	o.register(f)
	f.StringVar(&o.amount, "amount", "100", "the base amount of one transfer, in naira")
	f.IntVar(&o.copies, "copies", probe.DefaultCopies, "copies of one request in the duplicate storm")
	f.IntVar(&o.drain, "drain", probe.DefaultDrain, "concurrent transfers in the drain")
	f.IntVar(&o.hangUps, "hang-ups", probe.DefaultHangUps, "rounds of the hang-up check, each at another moment")
	f.DurationVar(&o.timeout, "timeout", probe.DefaultTimeout, "how long one request may wait for its answer")
	f.DurationVar(&o.settle, "settle", probe.DefaultSettle, "how long an intent may stay unsettled (in progress, failing, unanswered) while it is retried")
	f.StringSliceVar(&o.only, "only", nil, "make only these checks (comma-separated): "+probe.CheckNames())
	f.StringSliceVar(&o.skip, "skip", nil, "leave out these checks (comma-separated names, as --only)")
	f.StringVar(&o.seed, "seed", "", "seed for the keys, the jitter and the hang-up moments (default: a new one)")
	f.BoolVar(&o.asJSON, "json", false, "print the report (or, with --dry-run, the plan) as JSON")
	f.BoolVar(&o.strict, "strict", false, "exit 1 also when a check could not be made (UNKNOWN or SKIPPED)")
	f.BoolVar(&o.noRestore, "no-restore", false, "do not send the money back at the end")
	f.StringVar(&o.closedAccount, "closed-account", "", "an account the team has closed, for refused-then-moved's closed recipient: a transfer to it is refused, --reopen-cmd reopens it, and the refusal's key is sent again")
	f.StringVar(&o.reopen, "reopen-cmd", "", "a command (run with sh -c, bounded by --restart-timeout) that reopens --closed-account")
	addHTMLFlag(f, &o.html)
	_ = c.RegisterFlagCompletionFunc("only", checkNameCompletion)
	_ = c.RegisterFlagCompletionFunc("skip", checkNameCompletion)
	return c
}

func checkNameCompletion(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var names []string
	for _, c := range probe.Checks() {
		names = append(names, c.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// probeConfig turns the command line into a probe.Config, or a usage error.
func (o probeOptions) config(app *App, args []string) (probe.Config, error) {
	var cfg probe.Config
	if len(args) == 0 {
		return cfg, usageError("give the target's base URL, like: bank-sim probe http://127.0.0.1:8080")
	}
	users, err := o.users()
	if err != nil {
		return cfg, err
	}
	seed, err := parseSeed(app, o.seed)
	if err != nil {
		return cfg, err
	}
	amount, err := parseNaira(o.amount)
	if err != nil {
		return cfg, usageError("%v", err)
	}
	contract := o.targetContract()
	cfg = probe.Config{
		URLs:        args,
		Contract:    contract,
		Payer:       users[0],
		Payee:       users[1],
		Third:       users[2],
		Amount:      amount,
		Seed:        seed,
		Timeout:     o.timeout,
		Settle:      o.settle,
		Copies:      o.copies,
		Drain:       o.drain,
		HangUps:     o.hangUps,
		Only:        o.only,
		Skip:        o.skip,
		AllowRemote: o.allowRemote,
		Given:       o.given(),
		NoRestore:   o.noRestore,
		Now:         app.Env.Now,
	}
	if o.timeout <= 0 || o.settle <= 0 {
		return cfg, usageError("--timeout and --settle must be above zero")
	}
	out, err := o.outside()
	if err != nil {
		return cfg, err
	}
	if o.restart != "" {
		cfg.Restart = probe.ShellRestart(o.restart, o.restartTimeout)
		cfg.RestartCommand = o.restart
		cfg.WaitFor = o.waitFor
	}
	cfg.DBListen, cfg.DBUpstream, cfg.LockTTL = out.dbListen, out.dbUpstream, o.lockTTL
	if (o.closedAccount == "") != (o.reopen == "") {
		return cfg, usageError("--closed-account and --reopen-cmd go together: the account the team closed, and the command that reopens it")
	}
	if o.closedAccount != "" {
		cfg.ClosedAccount, cfg.ReopenCommand = probe.ID(o.closedAccount), o.reopen
		cfg.Reopen = probe.ShellRestart(o.reopen, o.restartTimeout)
	}
	if o.hangUps < 0 {
		return cfg, usageError("--hang-ups must be zero or more")
	}
	// A slip in a check's name gets its nearest names, not all eleven.
	var checks []string
	for _, ch := range probe.Checks() {
		checks = append(checks, ch.Name)
	}
	for _, f := range []struct {
		flag  string
		names []string
	}{{"--only", o.only}, {"--skip", o.skip}} {
		for _, n := range f.names {
			if !slices.Contains(checks, n) {
				return cfg, usageError("%s: %v", f.flag, unknownName("check", n, checks, "bank-sim probe --help"))
			}
		}
	}
	if cfg.Balances, err = o.balances(app, contract, cfg.Owner, o.timeout); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%v", err)
	}
	return cfg, nil
}

func runProbe(ctx context.Context, app *App, o probeOptions, args []string) error {
	cfg, err := o.config(app, args)
	if err != nil {
		return err
	}
	if o.html != "" {
		if o.dryRun {
			return usageError("--html with --dry-run: a dry run sends nothing, so there is no report; leave one of them out")
		}
		if err := checkWritableFlag("--html", o.html); err != nil {
			return err
		}
	}
	// What Ctrl-C leaves as it is: not the target, which is not ours to stop.
	target := "the target " + cfg.URLs[0] + " is"
	if len(cfg.URLs) > 1 {
		target = "the targets " + strings.Join(cfg.URLs, ", ") + " are"
	}
	app.leftAlone = "the probe started no PostgreSQL and has closed its fault proxy; " + target + " not bank-sim's and keeps running"
	extra := o.balanceSources(app)
	if err := probeError(cfg.Guard(ctx, extra...)); err != nil {
		return err
	}
	plan, err := probe.NewPlan(cfg)
	if err != nil {
		return probeError(err)
	}
	out, p := app.Env.Stdout, app.palette()
	if !o.dryRun {
		if err := probeError(cfg.Reach(ctx)); err != nil {
			return err
		}
	}
	if o.dryRun {
		if o.asJSON {
			return writeJSON(out, plan)
		}
		printPlan(out, p, plan, &cfg)
		fmt.Fprintln(out, p.dim.Sprint("dry run: nothing was sent"))
		return nil
	}
	if !o.asJSON {
		printPlan(out, p, plan, &cfg)
		cfg.OnCheck = func(r probe.Result) { printResult(out, p, r) }
	}
	rep, err := probe.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			if rep != nil && rep.Restore != nil {
				fmt.Fprintf(app.Env.Stderr, "bank-sim probe: interrupted after %d check(s); restore: %s\n", len(rep.Checks), rep.Restore.Result)
			}
			return ctx.Err()
		}
		return probeError(err)
	}
	if o.asJSON {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else {
		printSummary(out, p, rep)
	}
	if o.html != "" {
		if err := writeHTML(app.Env, o.html, htmlreport.Probe(rep)); err != nil {
			return err
		}
	}
	switch {
	case rep.Failed > 0:
		return errFailed
	case o.strict && rep.NotMade > 0:
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("--strict: %d check(s) could not be made", rep.NotMade)}
	}
	return nil
}

// probeError gives a probe error its exit code: a target that cannot be
// reached, or is not the API at all, is not a failed check (3); one that
// does not speak the contract as the flags describe it is a usage error (2).
func probeError(err error) error {
	var ue *probe.UsageError
	var ne *probe.UnreachableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return &ExitError{Code: ExitUsage, Err: err}
	case errors.As(err, &ne):
		return &ExitError{Code: ExitUnreachable, Err: err}
	}
	return &ExitError{Code: ExitFailed, Err: err}
}

func printPlan(out io.Writer, p *palette, plan *probe.Plan, cfg *probe.Config) {
	c := cfg.Contract
	fmt.Fprintf(out, "%s %s\n", p.head.Sprint("bank-sim probe"), p.dim.Sprintf("· seed %d · %s", plan.Seed, strings.Join(plan.Target, ", ")))
	body := fmt.Sprintf(`{"%s","%s","%s"}`, c.FromField, c.ToField, c.AmountField)
	auth := c.AuthHeader + ": " + strings.TrimSpace(c.AuthScheme+" TOKEN")
	answer := c.IDField
	if c.BalanceField != "" {
		answer += ", " + c.BalanceField
	}
	fmt.Fprintf(out, "%-9s POST %s · %s · %s · %s → %s\n", "contract", c.Path, auth, c.KeyHeader, body, answer)
	fmt.Fprintf(out, "%-9s %s pays from account %s · %s receives on account %s and is the second user · account %s is the other recipient\n",
		"users", cfg.Payer.Name, cfg.Payer.Account, cfg.Payee.Name, cfg.Payee.Account, cfg.Third.Account)
	fmt.Fprintf(out, "%-9s %s\n", "money", plan.Money)
	fmt.Fprintf(out, "%-9s %s\n", "balances", plan.Balances)
	fmt.Fprintf(out, "%-9s %s\n", "replays", plan.Replays)
	printKeyRefusals(out, cfg.Contract)
	fmt.Fprintf(out, "%-9s %s\n", "restore", plan.Restore)
	fmt.Fprintf(out, "%-9s %d:\n", "checks", len(plan.Checks))
	for _, ch := range plan.Checks {
		fmt.Fprintf(out, "  %-21s %s %s\n", ch.Name, ch.Title, p.dim.Sprint("— moves "+ch.Moves))
	}
}

func printResult(out io.Writer, p *palette, r probe.Result) {
	status := map[probe.Status]string{
		probe.Pass:    p.ok.Sprint("PASS   "),
		probe.Fail:    p.bad.Sprint("FAIL   "),
		probe.Unknown: p.warn.Sprint("UNKNOWN"),
		probe.Skipped: p.warn.Sprint("SKIPPED"),
	}[r.Status]
	fmt.Fprintf(out, "\n%s %s %s\n", status, p.bold.Sprint(r.Name), p.dim.Sprint("— "+r.Title))
	for _, e := range r.Evidence {
		// A line of evidence quotes the target: its newlines too are
		// the target's, and would let it start a line of its own.
		e = termtext.Escape(e)
		switch {
		case strings.HasPrefix(e, "✓"):
			fmt.Fprintf(out, "        %s\n", p.ok.Sprint(e))
		case strings.HasPrefix(e, "✗"):
			fmt.Fprintf(out, "        %s\n", p.bad.Sprint(e))
		case strings.HasPrefix(e, "?"), strings.HasPrefix(e, "⚠"):
			fmt.Fprintf(out, "        %s\n", p.warn.Sprint(e))
		default:
			fmt.Fprintf(out, "        %s\n", e)
		}
	}
	switch r.Status {
	case probe.Pass:
		fmt.Fprintf(out, "        %s %s\n", p.ok.Sprint("proves:"), r.Proves)
	case probe.Skipped:
		fmt.Fprintf(out, "        %s %s\n", p.warn.Sprint("not made:"), termtext.Escape(r.Reason))
	}
}

func printSummary(out io.Writer, p *palette, rep *probe.Report) {
	fmt.Fprintln(out)
	pre := rep.Preflight
	if pre.Attempt != nil && pre.Attempt.Answer != nil {
		caps := rep.Capabilities
		yes := map[bool]string{true: "yes", false: "no"}
		fmt.Fprintf(out, "%-9s the first transfer was answered %s · balance in answers: %s · replays marked: %s · key lookup: %s · exact balances: %s\n",
			"target", pre.Attempt.Answer, yes[caps.Balance], yes[caps.Replayed], yes[caps.Lookup], yes[caps.Exact])
	}
	if rep.Restore != nil {
		mark := p.ok.Sprint(rep.Restore.Result)
		if !rep.Restore.OK {
			mark = p.warn.Sprint(rep.Restore.Result)
		}
		fmt.Fprintf(out, "%-9s %s\n", "restore", mark)
	}
	for k, u := range rep.Unchecked {
		label := ""
		if k == 0 {
			label = "unchecked"
		}
		fmt.Fprintf(out, "%-9s %s %s %s\n", label, u.What, p.warn.Sprint("("+u.Flag+")"), p.dim.Sprint("— "+u.Why))
	}
	verdict := p.ok.Sprint(rep.Verdict)
	if rep.Failed > 0 {
		verdict = p.bad.Sprint(rep.Verdict)
	} else if rep.NotMade > 0 {
		verdict = p.warn.Sprint(rep.Verdict)
	}
	fmt.Fprintf(out, "%-9s %s %s\n", "verdict", verdict, p.dim.Sprintf("(%s, seed %d)", time.Duration(rep.Duration).Round(time.Millisecond), rep.Seed))
}
