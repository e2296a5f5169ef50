package probe

import (
	"fmt"
	"strings"
	"time"
)

// Report is a whole run: what was probed, what it exposes, each check's
// verdict with its evidence, and the money sent back at the end.
type Report struct {
	Seed         uint64       `json:"seed,string"` // a string: JavaScript and jq round numbers above 2^53
	Target       []string     `json:"target"`
	Contract     Contract     `json:"contract"`
	Balances     string       `json:"balances,omitempty"`
	Started      time.Time    `json:"started"`
	Preflight    Preflight    `json:"preflight"`
	Capabilities Capabilities `json:"capabilities"`
	Checks       []Result     `json:"checks"`
	Restore      *Restore     `json:"restore,omitempty"`
	// Unchecked is what this run could not check on this target, and the
	// flag that would check it.
	Unchecked []Unchecked `json:"unchecked"`
	Duration  Duration    `json:"duration"`

	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	NotMade int `json:"notMade"` // UNKNOWN or SKIPPED
	// Verdict is the run's one-line conclusion.
	Verdict string `json:"verdict"`
}

// Preflight is the first transfer, which shows the target speaks the
// contract, and what it revealed.
type Preflight struct {
	Attempt *Attempt `json:"attempt"`
	// Opening are the balances read before any transfer, when there is an
	// exact source.
	Opening map[ID]int64 `json:"opening,omitempty"`
	// Lookup is what GET Contract.Lookup said of the preflight's key.
	Lookup string `json:"lookup,omitempty"`
}

// Restore is the transfer that sent the checks' net movement back.
type Restore struct {
	Sent   string `json:"sent,omitempty"`
	Result string `json:"result"`
	OK     bool   `json:"ok"`
}

// Failures returns the failed checks' names.
func (r *Report) Failures() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.Name)
		}
	}
	return out
}

// Check returns the result of the check called name.
func (r *Report) Check(name string) (Result, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}

func (r *Report) tally() {
	r.Passed, r.Failed, r.NotMade = 0, 0, 0
	var notMade []string
	for _, c := range r.Checks {
		switch c.Status {
		case Pass:
			r.Passed++
		case Fail:
			r.Failed++
		default:
			r.NotMade++
			notMade = append(notMade, c.Name)
		}
	}
	n := len(r.Checks)
	switch {
	case r.Failed > 0:
		r.Verdict = fmt.Sprintf("FAIL: %d of %d checks failed (%s); this endpoint is not safe to retry", r.Failed, n, strings.Join(r.Failures(), ", "))
	case r.NotMade > 0:
		// Said for one or many: "the other-copy check could not be made,
		// so this run says nothing about it".
		what, it := fmt.Sprintf("the %s check", notMade[0]), "it"
		if len(notMade) > 1 {
			what, it = fmt.Sprintf("%d checks (%s)", len(notMade), strings.Join(notMade, ", ")), "them"
		}
		r.Verdict = fmt.Sprintf("PASS on what could be checked: %d of %d checks passed; %s could not be made, so this run says nothing about %s", r.Passed, n, what, it)
	default:
		r.Verdict = fmt.Sprintf("PASS: all %d checks passed", n)
	}
	if r.Failed == 0 && len(r.Unchecked) > 0 {
		// A pass vouches only for what was tried.
		var what []string
		for _, u := range r.Unchecked {
			what = append(what, u.What+" ("+u.Flag+")")
		}
		r.Verdict += "; not checked on this target: " + strings.Join(what, ", ")
	}
}

// Plan is what a run will do, before it does anything: the checks and the
// money each moves.
type Plan struct {
	Target   []string    `json:"target"`
	Seed     uint64      `json:"seed,string"`
	Checks   []PlanCheck `json:"checks"`
	Money    string      `json:"money"`
	Balances string      `json:"balances"`
	Replays  string      `json:"replays"`
	Restore  string      `json:"restore"`
}

// PlanCheck is one check in a Plan.
type PlanCheck struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Moves string `json:"moves"`
}

// NewPlan describes the run cfg would make, without touching the network.
func NewPlan(cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{Target: cfg.URLs, Seed: cfg.Seed}
	for _, ch := range cfg.selected() {
		p.Checks = append(p.Checks, PlanCheck{Name: ch.Name, Title: ch.Title, Moves: ch.Moves(&cfg)})
	}
	p.Money = fmt.Sprintf("only between %s's account %s and %s's account %s (the third account, %s, must refuse everything sent to it); "+
		"transfers of about %s each, %s in all before the drain, which moves up to %s's whole balance",
		cfg.Payer.Name, cfg.Payer.Account, cfg.Payee.Name, cfg.Payee.Account, cfg.Third.Account, Kobo(cfg.Amount), Kobo(cfg.plannedTotal()), cfg.Payer.Name)
	if cfg.Balances != nil {
		p.Balances = "exact: " + cfg.Balances.Describe()
	} else {
		p.Balances = "from the answers only (" + cfg.Contract.BalanceField + "); give --balances-url or --database-url with --balances-sql to check money exactly"
	}
	if cfg.Contract.ExactReplays {
		p.Replays = "compared with the first answer byte for byte; a difference fails (--exact-replays)"
	} else {
		p.Replays = "compared with the first answer byte for byte; a difference is warned about, not failed (give --exact-replays if the target promises byte-for-byte replays)"
	}
	if cfg.NoRestore {
		p.Restore = "no (--no-restore): the money stays where the checks moved it"
	} else {
		p.Restore = fmt.Sprintf("yes: at the end, the net amount goes back from %s to %s with one more transfer", cfg.Payee.Name, cfg.Payer.Name)
	}
	return p, nil
}

// plannedTotal is the most the checks before the drain move from the payer
// if the target behaves: one transfer of each check's amount per intent
// that should succeed.
func (c *Config) plannedTotal() int64 {
	c.defaults()
	total := c.Amount // the preflight's
	for i, ch := range Checks() {
		if !c.isSelected(ch.Name) {
			continue
		}
		amount := c.Amount + int64(i+1)
		switch ch.Name {
		case "replay", "other-copy", "double-tap", "storm", "other-user-same-key", "no-key", "no-token", "cross-user-replay":
			total += amount
		case "lost-response", "key-reused-amount", "key-reused-recipient": // two intents, or one and a witness
			total += 2 * amount
		case "refused-then-moved": // bola pays ada the amount: ada needs that much less
			total -= amount
		case "db-faults":
			if c.DBListen != "" {
				total += 2 * dbRounds * amount
			}
		case "restart":
			if c.Restart != nil {
				total += amount
			}
		case "hang-up":
			total += int64(c.HangUps) * amount
		}
	}
	return total
}

func (c *Config) isSelected(name string) bool {
	for _, ch := range c.selected() {
		if ch.Name == name {
			return true
		}
	}
	return false
}
