package cmd

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/banksim/bank-sim/probe"
	"github.com/banksim/bank-sim/probe/judge"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"
)

// targetFlags describe someone else's transfer API from outside: how it
// spells the transfer (probe.Contract), the users to act as, where its
// balances can be read, and the safety switches. probe and chaos --target
// share them.
type targetFlags struct {
	tokens, accounts []string
	contract         probe.Contract
	lookup           string
	balancesURL      string
	balancesField    string
	balancesSQL      string
	allowRemote      bool
	dryRun           bool
	// What makes a class checkable that no client outside can cause: a
	// restart of the target (--restart, bounded by --restart-timeout, then
	// --wait-for until it answers) and its database's failures
	// (--db-proxy, with the target's --lock-ttl).
	restart        string
	restartTimeout time.Duration
	waitFor        time.Duration
	dbProxy        string
	lockTTL        time.Duration
	// flags is the command's flag set, to ask which flags were given.
	flags *pflag.FlagSet
}

// given names the flags given that make a class of defect checkable on a
// target (probe.FlagRestart, probe.FlagDBProxy): a report lists the others
// as unchecked, with the flag.
func (o targetFlags) given() []string {
	var out []string
	for _, name := range []string{probe.FlagRestart, probe.FlagDBProxy} {
		if f := o.flags.Lookup(name); f != nil && f.Changed {
			out = append(out, name)
		}
	}
	return out
}

// outsideFlags are --restart's and --db-proxy's, read.
type outsideFlags struct {
	dbListen, dbUpstream string
}

// outside checks the flags of what no client can cause, and splits
// --db-proxy.
func (o targetFlags) outside() (outsideFlags, error) {
	var out outsideFlags
	if o.restartTimeout <= 0 || o.waitFor <= 0 {
		return out, usageError("--restart-timeout and --wait-for must be above zero")
	}
	if o.dbProxy != "" {
		listen, upstream, ok := strings.Cut(o.dbProxy, "=")
		if !ok || listen == "" || upstream == "" {
			return out, usageError("--db-proxy %q: give LISTEN=UPSTREAM, like 127.0.0.1:6433=127.0.0.1:5432 (the proxy listens on the first, PostgreSQL is the second)", o.dbProxy)
		}
		out.dbListen, out.dbUpstream = listen, upstream
	}
	if o.lockTTL < 0 {
		return out, usageError("--lock-ttl must be zero or more")
	}
	return out, nil
}

// register adds the flags to f, with the lesson's contract as defaults.
func (o *targetFlags) register(f *pflag.FlagSet) {
	o.contract = probe.LessonContract()
	o.flags = f
	f.StringVar(&o.restart, "restart", "", "a command (run with sh -c) that restarts the target between a key's answer and its retry: 'systemctl restart api', 'docker restart api', a script")
	f.DurationVar(&o.restartTimeout, "restart-timeout", time.Minute, "how long --restart may run before it is killed")
	f.DurationVar(&o.waitFor, "wait-for", probe.DefaultWaitFor, "how long the target may take to answer again after --restart (it is polled until it does)")
	f.StringVar(&o.dbProxy, "db-proxy", "", "LISTEN=UPSTREAM: put bank-sim's database fault proxy on LISTEN in front of the target's PostgreSQL at UPSTREAM, and fail commits through it (point the API's database URL at LISTEN)")
	f.DurationVar(&o.lockTTL, "lock-ttl", 0, "how long the target holds a key's lock: after a database failure a retry may be told 409 that long (plus --settle), and no longer")
	f.StringArrayVar(&o.tokens, "token", nil, "a user's credentials as `NAME=TOKEN`: ada pays, bola receives and is the second user, chidi owns the third account (default ada=token-ada, bola=token-bola)")
	f.StringArrayVar(&o.accounts, "account", nil, "a user's account as `NAME=ID` (default ada=1, bola=2, chidi=3)")
	f.StringVar(&o.contract.Path, "path", o.contract.Path, "the transfer endpoint's path")
	f.StringVar(&o.contract.KeyHeader, "key-header", o.contract.KeyHeader, "the idempotency key's header")
	f.StringVar(&o.contract.AuthHeader, "auth-header", o.contract.AuthHeader, "the credentials' header")
	f.StringVar(&o.contract.AuthScheme, "auth-scheme", o.contract.AuthScheme, "the word before the token in the credentials' header ('' for the bare token)")
	f.StringVar(&o.contract.FromField, "from-field", o.contract.FromField, "the request member naming the sender's account")
	f.StringVar(&o.contract.ToField, "to-field", o.contract.ToField, "the request member naming the recipient's account")
	f.StringVar(&o.contract.AmountField, "amount-field", o.contract.AmountField, "the request member with the amount, a whole number in the smallest unit (kobo)")
	f.StringVar(&o.contract.IDField, "id-field", o.contract.IDField, "the answer member with the transfer's id (a dotted path for a nested one)")
	f.StringVar(&o.contract.BalanceField, "balance-field", o.contract.BalanceField, "the answer member with the sender's balance after the transfer ('' if the answers have none)")
	f.StringVar(&o.contract.ReplayedHeader, "replayed-header", o.contract.ReplayedHeader, "the header that marks a replayed answer, if any (only ever evidence)")
	f.BoolVar(&o.contract.ExactReplays, "exact-replays", false, "the target promises that a replay is its first answer byte for byte (bank-sim serve does): a replay in other bytes fails instead of being warned about")
	f.Var(&keyRefusalFlag{&o.contract.KeyRefusals}, "key-refusal", "the target's own refusal of a key reused for another request, as `STATUS[:CODE]` (the code from the body's code, error or error.code member), beyond the lesson's 422 with a code naming the key; repeat for more, like --key-refusal 417 --key-refusal 422:IDEMPOTENCY_FINGERPRINT_MISMATCH")
	f.StringVar(&o.lookup, "lookup", o.contract.Lookup, "the GET path, with {key}, that answers what became of a key ('none' if there is none)")
	f.StringVar(&o.balancesURL, "balances-url", "", "read each balance with a GET of this `TEMPLATE` ({id} is the account), as the account's owner")
	f.StringVar(&o.balancesField, "balances-field", "balanceKobo", "the member of the --balances-url answer with the balance (a dotted path for a nested one)")
	f.StringVar(&o.balancesSQL, "balances-sql", "", "read the balances from the target's database (--database-url) with this `QUERY`, returning account id and balance; run read-only")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "allow a target (or balance source) that is not on this machine")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and the money it would move, and send nothing")
}

// targetUsers are the roles, by the names --token and --account take.
var targetUsers = []struct {
	name, role, token, account string
}{
	{"ada", "pays", "token-ada", "1"},
	{"bola", "receives, and is the second user", "token-bola", "2"},
	{"chidi", "owns the other recipient's account", "", "3"},
}

// users are ada, bola and chidi, with the flags' tokens and accounts.
func (o targetFlags) users() ([]probe.User, error) {
	tokens, err := pairs("--token", o.tokens)
	if err != nil {
		return nil, err
	}
	accounts, err := pairs("--account", o.accounts)
	if err != nil {
		return nil, err
	}
	var users []probe.User
	for _, u := range targetUsers {
		user := probe.User{Name: u.name, Token: u.token, Account: probe.ID(u.account)}
		if t, ok := tokens[u.name]; ok {
			user.Token = t
		}
		if a, ok := accounts[u.name]; ok {
			user.Account = probe.ID(a)
		}
		users = append(users, user)
	}
	return users, nil
}

// pairs reads NAME=VALUE flags for the users.
func pairs(flag string, vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		name, value, ok := strings.Cut(v, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || value == "" {
			return nil, usageError("%s %q: want NAME=VALUE, like %s ada=%s", flag, v, flag, map[string]string{"--token": "token-ada", "--account": "1"}[flag])
		}
		known := false
		for _, u := range targetUsers {
			known = known || u.name == name
		}
		if !known {
			return nil, usageError("%s %q: the users are ada (pays), bola (receives, and is the second user) and chidi (owns the third account)", flag, v)
		}
		out[name] = value
	}
	return out, nil
}

// targetContract is the contract the flags give (--lookup none: no lookup).
func (o targetFlags) targetContract() probe.Contract {
	c := o.contract
	c.Lookup = o.lookup
	if o.lookup == "none" {
		c.Lookup = ""
	}
	return c
}

// balances is the balance source the flags give, or nil for none.
func (o targetFlags) balances(app *App, contract probe.Contract, owner func(probe.ID) (probe.User, bool), timeout time.Duration) (probe.Balances, error) {
	switch {
	case o.balancesURL != "" && o.balancesSQL != "":
		return nil, usageError("give --balances-url or --balances-sql, not both")
	case o.balancesURL != "":
		if !strings.Contains(o.balancesURL, "{id}") {
			return nil, usageError("--balances-url %q has no {id} for the account, like http://127.0.0.1:8080/accounts/{id}", o.balancesURL)
		}
		if u, err := url.Parse(strings.ReplaceAll(o.balancesURL, "{id}", "1")); err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, usageError("--balances-url %q is not an http URL template like http://127.0.0.1:8080/accounts/{id}", o.balancesURL)
		}
		if o.balancesField == "" {
			return nil, usageError("--balances-field must name the balance's member")
		}
		return &probe.HTTPBalances{Template: o.balancesURL, Field: o.balancesField, Owner: owner, Auth: contract, Timeout: timeout}, nil
	case o.balancesSQL != "":
		if app.databaseURL == "" {
			return nil, usageError("--balances-sql needs --database-url: the target's own database, which is read read-only")
		}
		if _, err := pgx.ParseConfig(app.databaseURL); err != nil {
			return nil, usageError("--database-url: %v", err)
		}
		return &probe.SQLBalances{URL: app.databaseURL, Query: o.balancesSQL, Timeout: timeout}, nil
	case app.databaseURL != "":
		return nil, usageError("--database-url is the target's database here, and needs --balances-sql 'SELECT id, balance FROM …' to read balances from it")
	}
	return nil, nil
}

// balanceSources are the balance sources' addresses, for the loopback
// guard.
func (o targetFlags) balanceSources(app *App) []string {
	var extra []string
	if o.balancesURL != "" {
		extra = append(extra, o.balancesURL)
	}
	if o.balancesSQL != "" {
		// A Unix socket is on this machine by definition.
		if c, _ := pgx.ParseConfig(app.databaseURL); !strings.HasPrefix(c.Host, "/") {
			extra = append(extra, "postgres://"+net.JoinHostPort(c.Host, fmt.Sprint(c.Port)))
		}
	}
	return extra
}

// keyRefusalFlag is --key-refusal: each use adds one of the target's own
// refusals of a reused key to the contract's judge.
type keyRefusalFlag struct{ rules *[]judge.Rule }

func (f *keyRefusalFlag) String() string {
	if f.rules == nil {
		return ""
	}
	var s []string
	for _, r := range *f.rules {
		s = append(s, r.String())
	}
	return strings.Join(s, ",")
}

func (f *keyRefusalFlag) Set(v string) error {
	r, err := judge.ParseRule(v)
	if err != nil {
		return err
	}
	*f.rules = append(*f.rules, r)
	return nil
}

func (f *keyRefusalFlag) Type() string { return "STATUS[:CODE]" }
