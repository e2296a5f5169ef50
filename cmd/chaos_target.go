package cmd

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/probe"
	"github.com/spf13/cobra"
)

// targetConfig is chaos --target's configuration: the run's own flags, and
// the target described by the probe's.
func (o chaosOptions) targetConfig(app *App, c *cobra.Command, seed uint64, rates chaos.Rates) (chaos.Config, error) {
	for _, name := range []string{"bug", "http", "kill-postgres", "failover", "replication", "failover-cmd", "expect-failover", "failover-timeout", "servers", "accounts", "duration"} {
		if c.Flags().Changed(name) {
			return chaos.Config{}, usageError("--%s is for bank-sim's own server, not for --target: someone else's server is run, numbered and broken by its owner", name)
		}
	}
	// The scheduler steps bank-sim's own clients and servers statement by
	// statement; someone else's server runs on its own time.
	for _, name := range []string{"deterministic", "shrink", "save-recipe", "seeds", "junit", "parallel", "shard", "campaign-out"} {
		if c.Flags().Changed(name) {
			return chaos.Config{}, usageError("--%s needs bank-sim's own server, run statement by statement by its scheduler; a --target runs on its own time, so a seed repeats its intents and faults, not its interleaving", name)
		}
	}
	if !c.Flags().Changed("faults") {
		rates = nil // the network's, chaos.TargetRates
	}
	for k, r := range rates {
		if r > 0 && !slices.Contains(chaos.TargetFaultKinds(), k) {
			return chaos.Config{}, usageError("--faults %s: it happens inside a server, and cannot be injected into someone else's server; with --target the faults are the network's: %s",
				k, strings.Join(chaos.TargetFaultKinds(), ", "))
		}
	}
	users, err := o.users()
	if err != nil {
		return chaos.Config{}, err
	}
	amount, err := parseNaira(o.amount)
	if err != nil {
		return chaos.Config{}, usageError("%v", err)
	}
	out, err := o.outside()
	if err != nil {
		return chaos.Config{}, err
	}
	t := &chaos.Target{URLs: o.targets, Contract: o.targetContract(), Users: users, Amount: amount, AllowRemote: o.allowRemote, Given: o.given(),
		DBListen: out.dbListen, DBUpstream: out.dbUpstream, LockTTL: o.lockTTL}
	if o.restart != "" {
		t.Restart, t.RestartCommand, t.WaitFor = probe.ShellRestart(o.restart, o.restartTimeout), o.restart, o.waitFor
	}
	owner := probe.Owners(users...)
	cfg := chaos.Config{Seed: seed, Clients: o.clients, Intents: o.intents, Faults: rates, MaxAttempts: o.maxAttempts, Target: t}.WithDefaults()
	if cfg.Target.Balances, err = o.balances(app, t.Contract, owner, cfg.Target.Timeout); err != nil {
		return chaos.Config{}, err
	}
	if cfg.Target.Balances != nil {
		cfg.Target.BalancesFrom = cfg.Target.Balances.Describe()
	}
	if o.history != "" {
		if err := checkWritableFlag("--history", o.history); err != nil {
			return chaos.Config{}, err
		}
	}
	if err := cfg.Target.Validate(); err != nil {
		return chaos.Config{}, usageError("%v", err)
	}
	return cfg, nil
}

// runChaosTarget runs chaos against someone else's server: refused off
// this machine unless --allow-remote, the plan and its money stated first,
// nothing sent with --dry-run.
func runChaosTarget(c *cobra.Command, app *App, o chaosOptions, cfg chaos.Config) error {
	ctx := c.Context()
	t := cfg.Target
	app.leftAlone = "chaos --target started no PostgreSQL and has closed its fault proxy; the target " + strings.Join(t.URLs, ", ") + " is not bank-sim's and keeps running"
	if err := probeError(t.Guard(ctx, o.balanceSources(app)...)); err != nil {
		return err
	}
	if !o.dryRun {
		if err := probeError(t.Reach(ctx)); err != nil {
			return err
		}
	}
	out, p := app.Env.Stdout, app.palette()
	plan := newTargetPlan(cfg)
	if o.asJSON && o.dryRun {
		return writeJSON(out, plan)
	}
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim chaos --target · seed %d (repeat this run with --seed %d)\n", cfg.Seed, cfg.Seed)
		printTargetPlan(out, p, plan)
		o.planned = plan.Cannot // the report refers to them
	}
	if o.dryRun {
		fmt.Fprintln(out, p.dim.Sprint("dry run: nothing was sent"))
		return nil
	}
	bar := newProgress(app, "intents settled", "bank-sim chaos:", o.asJSON)
	h, err := chaos.RunWith(ctx, nil, cfg, chaos.Options{Progress: bar.update})
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return targetError(err)
	}
	return o.verdict(app.Env, out, p, h, nil)
}

// targetError gives a target run's error its exit code: 3 for a target or
// balance source that cannot be reached, 2 for one that does not speak the
// contract or a source that answers with no balances, 1 for anything else.
func targetError(err error) error {
	var be *probe.BalanceError
	if errors.As(err, &be) {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return probeError(err)
}

// targetPlan is what chaos --target will do, before it does anything.
type targetPlan struct {
	Seed     string            `json:"seed"`
	Target   []string          `json:"target"`
	Intents  int               `json:"intents"`
	Clients  int               `json:"clients"`
	Money    string            `json:"money"`
	Moves    map[string]int64  `json:"movesKobo"`
	Balances string            `json:"balances"`
	Faults   string            `json:"faults"`
	Checks   []string          `json:"checks"`
	Cannot   []chaos.Unchecked `json:"cannot"`
	contract probe.Contract
}

// printKeyRefusals says, when the target refuses reused keys its own way
// (--key-refusal), how its answers are judged: the reader sees what a
// refusal of a key will be taken to be.
func printKeyRefusals(out io.Writer, c probe.Contract) {
	if len(c.KeyRefusals) == 0 {
		return
	}
	var rules []string
	for _, r := range c.KeyRefusals {
		rules = append(rules, r.String())
	}
	fmt.Fprintf(out, "%-9s a reused key is refused with 422 and a code naming the key (the lesson's), or %s (--key-refusal)\n", "key", strings.Join(rules, ", "))
}

func newTargetPlan(cfg chaos.Config) targetPlan {
	t := cfg.Target
	moves := t.Money(cfg)
	payer, payee := t.Users[0], t.Users[1]
	plan := targetPlan{
		Seed: fmt.Sprint(cfg.Seed), Target: t.URLs, Intents: cfg.Intents, Clients: cfg.Clients, Moves: moves,
		Money: fmt.Sprintf("only between %s's account %s and %s's account %s, transfers of %s to %s (and of %s once in 80 intents, paying a payer after a transfer of more than they hold): up to %s from %s to %s and %s from %s to %s if the target accepts every one; "+
			"the money stays where the run leaves it (%s's account %s is named only by keys reused for another recipient, which must be refused)",
			payer.Name, payer.Account, payee.Name, payee.Account, probe.Kobo(t.Amount), probe.Kobo(2*t.Amount-1), probe.Kobo(chaos.FundsAmount(t)),
			probe.Kobo(moves[payer.Name]), payer.Name, payee.Name, probe.Kobo(moves[payee.Name]), payee.Name, payer.Name, t.Users[2].Name, t.Users[2].Account),
		Faults: cfg.Faults.String() + " (the network's only)",
		Checks: []string{"at most one transfer per key", "no transfer told to two intents", "every final answer one the contract allows",
			"every later answer to a key its first, replayed", "every intent settled",
			"another user's copy of a request, key and body, refused", "a refused key refused again, even after money arrived",
			"a request without a key refused", "a retry with its members in another order answered as the first"},
		Cannot: t.Unchecked(), contract: t.Contract,
	}
	if t.DBListen != "" {
		plan.Checks = append(plan.Checks, fmt.Sprintf("the database failed at a commit through %s (--db-proxy) and healed: no 5xx stored as a key's answer, no key told 409 past --lock-ttl", t.DBListen))
	}
	if t.RestartCommand != "" {
		plan.Checks = append(plan.Checks, "keys kept across a restart of the target (--restart)")
	}
	if t.Balances != nil {
		plan.Balances = "exact: " + t.BalancesFrom
		plan.Checks = append(plan.Checks, "total conserved", "no negative balance", "each account moved by exactly the acknowledged transfers")
	} else {
		plan.Balances = "none: the answers' transfer ids only; give --balances-url or --database-url with --balances-sql to check money"
	}
	return plan
}

func printTargetPlan(out io.Writer, p *palette, plan targetPlan) {
	fmt.Fprintf(out, "%-9s %s, through bank-sim's fault proxy\n", "target", strings.Join(plan.Target, ", "))
	fmt.Fprintf(out, "%-9s %d intents, %d clients\n", "workload", plan.Intents, plan.Clients)
	fmt.Fprintf(out, "%-9s %s\n", "money", plan.Money)
	fmt.Fprintf(out, "%-9s %s\n", "balances", plan.Balances)
	fmt.Fprintf(out, "%-9s %s\n", "faults", plan.Faults)
	printKeyRefusals(out, plan.contract)
	fmt.Fprintf(out, "%-9s %s\n", "checks", strings.Join(plan.Checks, " · "))
	printUnchecked(out, p, "cannot", plan.Cannot)
}

// printUnchecked lists the rules a target run cannot check, and why.
func printUnchecked(out io.Writer, p *palette, label string, us []chaos.Unchecked) {
	for k, u := range us {
		if k > 0 {
			label = ""
		}
		fmt.Fprintf(out, "%-9s %s %s\n", label, u.Kind, p.dim.Sprint("— "+u.Why))
	}
}

// targetCheckTitle is a rule as a target run checks it, from outside.
func targetCheckTitle(kind string) string {
	switch kind {
	case chaos.KindTwice:
		return "no intent was told two different transfers (at most once per key)"
	case chaos.KindAckMissing:
		return "no transfer was told to two intents"
	case chaos.KindWrong:
		return "every final answer is one the contract allows for that request"
	case chaos.KindReplay:
		return "every later answer to a key is its first, replayed"
	case chaos.KindLedger:
		return "each balance is opening + the acknowledged transfers"
	}
	return checkTitle(kind)
}
