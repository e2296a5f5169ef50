package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/banksim/bank-sim/api/client"
)

// preflight reads the opening balances, makes one plain transfer to learn
// whether the target speaks the contract at all, and finds out what it
// exposes. A target that does not conform is a usage error (exit 2), with
// the flag that maps the difference; one that does not answer is
// unreachable (exit 3). Neither is a failed check.
func (r *run) preflight(ctx context.Context) (Preflight, error) {
	var pre Preflight
	if r.cfg.Balances != nil {
		b, err := r.readBalances(ctx)
		if err != nil {
			if unreachable(err) {
				return pre, &UnreachableError{fmt.Sprintf("cannot read the balances: %v", err)}
			}
			return pre, &UsageError{fmt.Sprintf("cannot read the balances: %v", err)}
		}
		r.establish(b)
		r.caps.Exact = true
		pre.Opening = b
	}

	in := &intent{Label: "preflight", User: r.cfg.Payer, Key: Key(r.cfg.Seed, "preflight", 1), T: Transfer{From: r.cfg.Payer.Account, To: r.cfg.Payee.Account, Amount: r.cfg.Amount}}
	r.cut = []*intent{in} // until it is answered: an interrupt settles it
	a := r.send(ctx, in, sendOpts{})
	pre.Attempt = a
	ep := r.eps[0]
	where := fmt.Sprintf("POST %s%s", ep.URL, r.cfg.Contract.Path)
	if a.Answer == nil {
		// How long it waited, as it was: the timeout only when it ran out.
		waited := fmt.Sprintf("after %s", time.Duration(a.Duration).Round(time.Millisecond))
		if a.Error == explain(context.DeadlineExceeded) {
			waited = fmt.Sprintf("waited %s", r.cfg.Timeout)
		}
		return pre, &UnreachableError{fmt.Sprintf("%s: %s (%s). The server accepted the connection but did not answer; is it stuck?", where, a.Error, waited)}
	}
	ans := a.Answer
	body := snippet(ans.Body)
	if re := client.Redirect(ans.Status, ans.Header, ep.URL+r.cfg.Contract.Path); re != nil {
		// The probe's requests never follow one (they are written on the
		// wire, to the address given); this says why nothing was judged.
		return pre, &UsageError{re.Error() + "; nothing was judged"}
	}
	switch {
	case htmlPage(ans) && !ans.Receipt():
		// A web server, not the API: its page says nothing to the probe
		// and would fill the terminal.
		return pre, &UnreachableError{fmt.Sprintf("%s answered %d with an HTML page (%s), not the transfer API's JSON. Is this the API's address, and is the transfer endpoint at another path (--path)?", where, ans.Status, pageExcerpt(ans.Body))}
	case ans.Status == http.StatusUnauthorized || ans.Status == http.StatusForbidden:
		return pre, &UsageError{fmt.Sprintf("%s with %s's token answered %d: the token was not accepted. Give the right one with --token %s=TOKEN (and --auth-header/--auth-scheme if credentials go elsewhere). The answer: %s", where, r.cfg.Payer.Name, ans.Status, r.cfg.Payer.Name, body)}
	case ans.Status == http.StatusNotFound && ans.Code != "account_not_found" || ans.Status == http.StatusMethodNotAllowed:
		return pre, &UsageError{fmt.Sprintf("%s answered %d: is the transfer endpoint at another path? Give it with --path. The answer: %s", where, ans.Status, body)}
	case ans.Status == http.StatusConflict:
		return pre, &UsageError{fmt.Sprintf("%s answered 409 to the probe's first key %s: that key is already in use on this server, probably by an earlier run with --seed %d. Run with another --seed", where, in.Key, r.cfg.Seed)}
	case ans.Status >= 500:
		return pre, &UsageError{fmt.Sprintf("%s answered %d to a plain transfer of %s from account %s to %s: the probe cannot judge a server that fails a plain request. The answer: %s", where, ans.Status, Kobo(in.T.Amount), in.T.From, in.T.To, body)}
	case !ans.OK():
		return pre, &UsageError{fmt.Sprintf("%s refused a plain transfer of %s from %s's account %s to account %s: %d. Check the accounts (--account), the body's names (--from-field, --to-field, --amount-field; the probe sent %s) and that the account can pay. The answer: %s",
			where, Kobo(in.T.Amount), r.cfg.Payer.Name, in.T.From, in.T.To, ans.Status, a.Body, body)}
	case ans.TransferID == "":
		return pre, &UsageError{fmt.Sprintf("%s answered %d without a transfer id in member %q: the probe tells one transfer from two by it. Name the member with --id-field (a dotted path for a nested one). The answer: %s", where, ans.Status, r.cfg.Contract.IDField, body)}
	case ans.Replayed:
		return pre, &UsageError{fmt.Sprintf("%s answered the probe's first key %s as a replay: the key was used before, probably by an earlier run with --seed %d. Run with another --seed", where, in.Key, r.cfg.Seed)}
	}

	r.cut = nil
	r.noteLatency(a.waited)

	// The opening balance, learnt from the first answer when nothing else
	// says it.
	if ans.Balance != nil {
		r.caps.Balance = true
		r.mu.Lock()
		if _, ok := r.opening[in.T.From]; !ok {
			r.opening[in.T.From] = *ans.Balance + in.T.Amount
			r.known[in.T.From] = *ans.Balance + in.T.Amount
		}
		r.mu.Unlock()
	}
	c := &checkRun{run: r, res: &Result{}}
	c.debit(receipt{in, ans})
	if len(c.fails) > 0 {
		return pre, &UsageError{fmt.Sprintf("the first transfer's answer does not add up: %s", strings.Join(c.fails, "; "))}
	}

	if r.cfg.Contract.Lookup != "" {
		la := r.lookup(ctx, in)
		switch {
		case la == nil:
			pre.Lookup = "no answer"
		case la.OK() && la.TransferID == ans.TransferID:
			r.caps.Lookup = true
			pre.Lookup = fmt.Sprintf("%d, transferId %s: the key's outcome can be looked up", la.Status, la.TransferID)
		default:
			pre.Lookup = fmt.Sprintf("%d: no lookup of a key's outcome (the checks use the answers only)", la.Status)
		}
	}
	if r.cfg.Balances != nil {
		// The preflight's own transfer, taken into the exact model.
		b, err := r.readBalances(ctx)
		if err == nil {
			r.establish(b)
		}
	}
	return pre, nil
}

// lookup asks the target what became of in's key (Contract.Lookup), as its
// user; nil when there is no answer.
func (r *run) lookup(ctx context.Context, in *intent) *Answer {
	c := r.cfg.Contract
	ep := r.eps[0]
	h := http.Header{}
	h.Set(c.AuthHeader, c.authValue(in.User.Token))
	h.Set("Accept", "application/json")
	target := ep.Prefix + strings.ReplaceAll(c.Lookup, "{key}", in.Key)
	status, header, body, err := roundTrip(ctx, wireRequest{Method: "GET", Addr: ep.Addr, Host: ep.Host, Target: target, Header: h}, r.cfg.Timeout)
	if err != nil {
		return nil
	}
	return c.read(status, header, body)
}

// restore sends the checks' net movement back, so that the accounts end
// where they started and the probe can be run again. The amount comes from
// the best knowledge the probe has: an exact read, else the balances in the
// answers, else the acknowledged transfers.
func (r *run) restore(ctx context.Context) *Restore {
	payer, payee := r.cfg.Payer, r.cfg.Payee
	var owed int64 // what the payee owes the payer
	how := ""
	if r.cfg.Balances != nil {
		if b, err := r.readBalances(ctx); err == nil {
			r.establish(b)
		}
	}
	r.mu.Lock()
	open, okOpen := r.opening[payer.Account]
	now, okNow := r.known[payer.Account]
	switch {
	case okOpen && okNow:
		owed, how = open-now, "the balances"
	default:
		owed, how = -r.net[payer.Account], "the acknowledged transfers"
	}
	r.mu.Unlock()
	if owed == 0 {
		return &Restore{Result: fmt.Sprintf("nothing to send back: by %s, %s's account is where it started", how, payer.Name), OK: true}
	}
	from, to := payee, payer
	if owed < 0 {
		from, to, owed = payer, payee, -owed
	}
	in := &intent{Label: "restore", User: from, Key: Key(r.cfg.Seed, "restore", 1), T: Transfer{From: from.Account, To: to.Account, Amount: owed}}
	r.send(ctx, in, sendOpts{})
	a, out := r.settle(ctx, in, 0)
	res := &Restore{Sent: fmt.Sprintf("%s from %s to %s (by %s)", Kobo(owed), from.Name, to.Name, how)}
	switch {
	case out == Settled && a.OK():
		res.OK = true
		res.Result = fmt.Sprintf("%s sent %s back to %s: %s", from.Name, Kobo(owed), to.Name, a)
	case a != nil:
		res.Result = fmt.Sprintf("%s could not send %s back to %s: %s", from.Name, Kobo(owed), to.Name, a)
	default:
		res.Result = fmt.Sprintf("%s could not send %s back to %s: no answer", from.Name, Kobo(owed), to.Name)
	}
	return res
}

// lookupPath is the lookup of in's key as evidence prints it.
func (r *run) lookupPath(in *intent) string {
	return strings.ReplaceAll(r.cfg.Contract.Lookup, "{key}", shortKey(in.Key))
}
