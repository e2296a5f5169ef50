package chaos

import (
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// facts are what the history says about the bank that no transfer changes:
// who owns each account, its status, and which intents name it. Owners and
// statuses stay as they opened during a run, so the lesson's rules decide
// most answers from them alone.
type facts struct {
	byID map[int64]bank.Account
	// named counts the intents whose request names each account, as sender
	// or recipient.
	named map[int64]int
}

func newFacts(h *History) *facts {
	f := &facts{byID: map[int64]bank.Account{}, named: map[int64]int{}}
	for _, a := range h.Opening {
		f.byID[a.ID] = a
	}
	for _, in := range h.Intents {
		f.named[in.Request.From]++
		if in.Request.To != in.Request.From {
			f.named[in.Request.To]++
		}
	}
	return f
}

// expectation is what the lesson's rules allow as the final answer to one
// intent.
type expectation struct {
	// reuse: the only right answer is 422 idempotency_key_reused.
	reuse bool
	// status and code are the one refusal the accounts decide, when they
	// decide one; status is 0 when the transfer may go through.
	status int
	code   string
	// rule names the rule behind that refusal (a Path*), for coverage.
	rule string
	// solo: no other intent names the sender, so its balance when this
	// intent runs is its opening balance, and the answer is known: 201
	// leaving balance-amount, or 422 insufficient_funds.
	solo    bool
	balance int64
}

// expect returns what the rules allow for in, in the order the transfer
// checks them.
func (f *facts) expect(in *Intent) expectation {
	if in.Reuse != "" {
		return expectation{reuse: true, status: 422, code: idem.CodeKeyReused}
	}
	r := in.Request
	refuse := func(status int, code, rule string) expectation {
		return expectation{status: status, code: code, rule: rule}
	}
	if r.From == r.To {
		return refuse(422, bank.CodeSameAccount, PathSameAccount)
	}
	sender, ok := f.byID[r.From]
	switch {
	case !ok:
		return refuse(404, bank.CodeAccountNotFound, "")
	case sender.OwnerID != in.UserID:
		return refuse(404, bank.CodeAccountNotFound, PathNotOwner)
	case sender.Status == "frozen":
		return refuse(422, bank.CodeAccountNotActive, PathFrozenSender)
	case sender.Status != "active":
		return refuse(422, bank.CodeAccountNotActive, PathClosedSender)
	}
	recipient, ok := f.byID[r.To]
	switch {
	case !ok:
		return refuse(422, bank.CodeRecipientUnavailable, PathMissingRecipient)
	case recipient.Status == "frozen":
		return refuse(422, bank.CodeRecipientUnavailable, PathFrozenRecipient)
	case recipient.Status != "active":
		return refuse(422, bank.CodeRecipientUnavailable, PathClosedRecipient)
	}
	if f.named[r.From] == 1 {
		return expectation{solo: true, balance: sender.BalanceKobo}
	}
	return expectation{}
}

// allows reports whether resp is an answer the rules allow, and if not,
// what they allow.
func (x expectation) allows(in *Intent, resp bank.Response) (bool, string) {
	switch {
	case x.status != 0:
		return resp.Status == x.status && resp.Code() == x.code, fmt.Sprintf("only %d %s", x.status, x.code)
	case x.solo && in.Request.AmountKobo > x.balance:
		return resp.Status == 422 && resp.Code() == bank.CodeInsufficientFunds,
			fmt.Sprintf("only 422 %s: it asks for %s and account %d, which no other intent touches, opened with %s",
				bank.CodeInsufficientFunds, bank.Naira(in.Request.AmountKobo), in.Request.From, bank.Naira(x.balance))
	case x.solo:
		rc, ok := resp.Receipt()
		want := x.balance - in.Request.AmountKobo
		return resp.Status == 201 && ok && rc.BalanceKobo == want,
			fmt.Sprintf("only 201 leaving %s: account %d, which no other intent touches, opened with %s", bank.Naira(want), in.Request.From, bank.Naira(x.balance))
	}
	return resp.OK() || resp.Status == 422 && resp.Code() == bank.CodeInsufficientFunds,
		fmt.Sprintf("only 201 or 422 %s", bank.CodeInsufficientFunds)
}

// describe says who asked what, for a violation's detail.
func (f *facts) describe(in *Intent) string {
	owner := "that does not exist"
	if a, ok := f.byID[in.Request.From]; ok {
		owner = fmt.Sprintf("%s, user %d's", a.Status, a.OwnerID)
	}
	to := "that does not exist"
	if a, ok := f.byID[in.Request.To]; ok {
		to = a.Status
	}
	s := fmt.Sprintf("%s (user %d: %s from account %d, %s, to account %d, %s)", in.Label, in.UserID,
		bank.Naira(in.Request.AmountKobo), in.Request.From, owner, in.Request.To, to)
	if in.Reuse != "" {
		s += fmt.Sprintf(", a reuse of %s's key with another %s", fmt.Sprintf("intent-%d", in.ReuseOf), in.Reuse)
	}
	return s
}
