package probe

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Status is a check's verdict.
type Status string

// The verdicts. Only PASS is a pass: a check that could not be made, or
// could not be decided, says so and is never counted as passed.
const (
	Pass    Status = "PASS"
	Fail    Status = "FAIL"
	Unknown Status = "UNKNOWN" // it ran, but what the target exposes cannot decide it
	Skipped Status = "SKIPPED" // it could not run
)

// Check is one of the lesson's stories told against the target.
type Check struct {
	// Name is how --only and --skip call it.
	Name string
	// Title is the story in one line.
	Title string
	// Proves is what a pass shows about the target.
	Proves string
	// Moves says, for the plan, what money the check moves if the target
	// behaves (and what it may move if it does not).
	Moves func(c *Config) string
	// Run tells the story.
	Run func(ctx context.Context, c *checkRun)
}

// Checks returns every check, in the order a run makes them.
func Checks() []Check {
	return []Check{
		checkReplay,
		checkLostResponse,
		checkOtherCopy,
		checkDoubleTap,
		checkStorm,
		checkReusedAmount,
		checkReusedRecipient,
		checkOtherUser,
		checkNoKey,
		checkNoToken,
		checkHangUp,
		checkCrossUserReplay,
		checkRefusedThenMoved,
		checkRestart,
		checkDBFaults,
		checkDrain,
	}
}

// CheckNames lists the checks' names, comma-separated, in run order.
func CheckNames() string {
	var names []string
	for _, c := range Checks() {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// Result is one check's verdict with its evidence.
type Result struct {
	Name   string `json:"name"`
	Title  string `json:"title"`
	Status Status `json:"status"`
	// Reason is the one-line why of a FAIL, UNKNOWN or SKIPPED.
	Reason string `json:"reason,omitempty"`
	// Evidence is what was sent and answered, in order, and what it means.
	Evidence []string `json:"evidence"`
	// Proves is what the pass shows (PASS only).
	Proves string `json:"proves,omitempty"`
	// Money is the money check's conclusion.
	Money    string     `json:"money,omitempty"`
	Attempts []*Attempt `json:"attempts"`
	Duration Duration   `json:"duration"`
}

// checkRun is one check being made: its intents, evidence and verdict.
type checkRun struct {
	*run
	check   Check
	index   int // the check's place in Checks(), for its amounts
	res     *Result
	intents []*intent
	fails   []string
	unknown []string
	skipped string
	// moves are the transfers the target acknowledged in this check, each
	// once; maybe are those whose outcome the probe could not learn.
	moves, maybe []Transfer
	// before is the exact balance read before the check, when there is one.
	before map[ID]int64
	// checked: some money evidence was verified (a balance in an answer, or
	// an exact read); needMoney: the answers alone cannot decide the check.
	checked, needMoney bool
	n                  int
}

// check makes one check, with the money read before and after it, and
// returns its intents too (an interrupted run settles them).
func (r *run) check(ctx context.Context, ch Check) (Result, []*intent) {
	res := &Result{Name: ch.Name, Title: ch.Title}
	c := &checkRun{run: r, check: ch, res: res}
	for i, k := range Checks() {
		if k.Name == ch.Name {
			c.index = i + 1
		}
	}
	start := time.Now()
	if r.cfg.Balances != nil {
		b, err := r.readBalances(ctx)
		if err != nil {
			c.unknownf("the balances could not be read before the check: %v", err)
		} else {
			c.before = b
			r.establish(b)
		}
	}
	ch.Run(ctx, c)
	if c.skipped == "" {
		c.money(ctx)
	}
	for _, in := range c.intents {
		res.Attempts = append(res.Attempts, in.Attempts...)
	}
	res.Duration = Duration(time.Since(start))
	switch {
	case c.skipped != "":
		res.Status, res.Reason = Skipped, c.skipped
	case len(c.fails) > 0:
		res.Status, res.Reason = Fail, strings.Join(c.fails, "; ")
	case len(c.unknown) > 0:
		res.Status, res.Reason = Unknown, strings.Join(c.unknown, "; ")
	default:
		res.Status, res.Proves = Pass, ch.Proves
	}
	return *res, c.intents
}

// amount is this check's amount: the base plus the check's number in kobo,
// so that every check's transfers can be told apart in a ledger.
func (c *checkRun) amount() int64 { return c.cfg.Amount + int64(c.index) }

// intent makes the check's next intent, with its own key.
func (c *checkRun) intent(label string, u User, t Transfer) *intent {
	c.n++
	in := &intent{Label: c.check.Name + " " + label, User: u, Key: Key(c.cfg.Seed, c.check.Name, c.n), T: t}
	c.intents = append(c.intents, in)
	return in
}

// pay is the payer's transfer of amount to the payee.
func (c *checkRun) pay(amount int64) Transfer {
	return Transfer{From: c.cfg.Payer.Account, To: c.cfg.Payee.Account, Amount: amount}
}

func (c *checkRun) evidence(format string, args ...any) {
	c.res.Evidence = append(c.res.Evidence, fmt.Sprintf(format, args...))
}

// saw adds an attempt to the evidence.
func (c *checkRun) saw(a *Attempt) { c.evidence("%s", a.line()) }

// sawAll adds every attempt of in from the i-th on.
func (c *checkRun) sawAll(in *intent, from int) {
	for _, a := range in.Attempts[from:] {
		c.saw(a)
	}
}

func (c *checkRun) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.fails = append(c.fails, msg)
	c.evidence("✗ %s", msg)
}

func (c *checkRun) unknownf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.unknown = append(c.unknown, msg)
	c.evidence("? %s", msg)
}

func (c *checkRun) okf(format string, args ...any) { c.evidence("✓ "+format, args...) }

func (c *checkRun) skip(format string, args ...any) { c.skipped = fmt.Sprintf(format, args...) }

// settled settles in on copy and fails the check if it cannot be settled,
// saying why; it returns the final answer, or nil.
func (c *checkRun) settled(ctx context.Context, in *intent, copy int) *Answer {
	from := len(in.Attempts)
	a, out := c.settle(ctx, in, copy)
	return c.verdict(in, a, out, from)
}

// verdict shows in's attempts from the from-th on, and fails the check if
// its outcome is not settled.
func (c *checkRun) verdict(in *intent, a *Answer, out Outcome, from int) *Answer {
	c.sawAll(in, from)
	switch out {
	case Stuck:
		c.failf("%s: %s after its request, every retry with the same key is still told 409 (in progress), though a fresh transfer takes about %s here: "+
			"the key is left claimed with nobody finishing it, and the intent cannot complete until the claim expires, if it ever does",
			in.Label, c.cfg.Settle, c.typicalLatency().Round(10*time.Microsecond))
	case Failing:
		msg := fmt.Sprintf("%s: every retry with the same key for %s was answered %d", in.Label, c.cfg.Settle, a.Status)
		if a.Replayed {
			msg += ", marked as a replay: a server error was stored as the key's answer, so the intent can never complete"
		}
		c.failf("%s", msg)
	case Silent:
		c.failf("%s: no answer to any retry within %s", in.Label, c.cfg.Settle)
	}
	if out != Settled {
		c.maybe = append(c.maybe, in.T)
		return nil
	}
	return a
}

// acknowledged records the intent's transfer as done once (its receipts are
// checked for being one transfer by the caller).
func (c *checkRun) acknowledged(in *intent) { c.moves = append(c.moves, in.T) }
