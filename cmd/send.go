package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/spf13/cobra"
)

type sendOptions struct {
	as       string
	to       int64
	amount   string
	key      string
	url      string
	attempts int
	timeout  time.Duration
	seed     string
}

func newSendCmd(app *App) *cobra.Command {
	var o sendOptions
	c := &cobra.Command{
		Use:   "send --as USER --to ACCOUNT --amount NAIRA",
		Short: "Send one transfer to a running 'bank-sim serve' through the retrying client",
		Long: `Send one transfer through the lesson's retrying client and print every attempt:
one Idempotency-Key for the intent, retries only after a network error, 409,
429 or 5xx, exponential backoff with jitter, Retry-After honoured. After the
last attempt an unanswered transfer is reported as pending, never as failed.

Exit code 0 when the transfer happened (2xx), 1 when it was refused or its
outcome is unknown, 2 for a usage error.`,
		Example: `  bank-sim send --as ada --to 2 --amount 10000
  bank-sim send --as ada --to 2 --amount 10000 --key 3f0c7a2e-6b1d-4c55-9a7e-0d2b8c1e4f60   send (or resend) with your own key
  bank-sim send --as bola --to 1 --amount 99.50 --url http://127.0.0.1:9000`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return runSend(c, app, o) },
	}
	f := c.Flags()
	f.StringVar(&o.as, "as", "", "who sends: ada, bola or chidi (their demo token and account)")
	f.Int64Var(&o.to, "to", 0, "the account to pay")
	f.StringVar(&o.amount, "amount", "", "how much, in naira (10000 or 99.50)")
	f.StringVar(&o.key, "key", "", "the Idempotency-Key (default: a new UUID); reuse one to retry an intent")
	f.StringVar(&o.url, "url", "http://127.0.0.1:8080", "the server's base URL")
	f.IntVar(&o.attempts, "attempts", client.DefaultAttempts, "at most this many attempts")
	f.DurationVar(&o.timeout, "timeout", client.DefaultTimeout, "how long one attempt may wait for its answer")
	f.StringVar(&o.seed, "seed", "", "seed for the backoff jitter (default: a new one)")
	return c
}

// users are the demo users by the name --as takes.
var users = map[string]struct {
	token   string
	account int64
}{
	"ada":   {"token-ada", 1},
	"bola":  {"token-bola", 2},
	"chidi": {"token-chidi", 3},
}

// parseNaira reads "10000", "10,000" or "99.50" as kobo, with integers only:
// money never passes through a float.
func parseNaira(s string) (int64, error) {
	bad := fmt.Errorf("--amount %q is not an amount in naira (like 10000 or 99.50)", s)
	s = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(s), "₦"), ",", "")
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || (hasFrac && (len(frac) == 0 || len(frac) > 2)) {
		return 0, bad
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, bad
		}
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > api.MaxSafeInteger/100 {
		return 0, fmt.Errorf("--amount %q is too large (at most ₦%d)", s, api.MaxSafeInteger/100)
	}
	kobo := n * 100
	if hasFrac {
		f, _ := strconv.ParseInt((frac + "0")[:2], 10, 64)
		kobo += f
	}
	if kobo <= 0 {
		return 0, fmt.Errorf("--amount %q must be above zero", s)
	}
	return kobo, nil
}

func (o sendOptions) check() (bank.TransferRequest, error) {
	u, ok := users[strings.ToLower(o.as)]
	if !ok {
		return bank.TransferRequest{}, usageError("--as %q is not a demo user; use ada, bola or chidi", o.as)
	}
	if o.to <= 0 || o.to > api.MaxSafeInteger {
		return bank.TransferRequest{}, usageError("--to must be an account number (1 for Ada, 2 for Bola, 3 for Chidi)")
	}
	if o.amount == "" {
		return bank.TransferRequest{}, usageError("--amount is required (in naira, like 10000)")
	}
	kobo, err := parseNaira(o.amount)
	if err != nil {
		return bank.TransferRequest{}, usageError("%v", err)
	}
	if o.key != "" && !idem.ValidKey(o.key) {
		return bank.TransferRequest{}, usageError("--key %q is not a valid Idempotency-Key: 16 to 64 letters, digits, - or _", o.key)
	}
	pu, err := url.Parse(o.url)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return bank.TransferRequest{}, usageError("--url %q is not an http(s) URL like http://127.0.0.1:8080", o.url)
	}
	if o.attempts < 1 || o.attempts > 20 {
		return bank.TransferRequest{}, usageError("--attempts must be from 1 to 20")
	}
	if o.timeout <= 0 {
		return bank.TransferRequest{}, usageError("--timeout must be above zero")
	}
	return bank.TransferRequest{From: u.account, To: o.to, AmountKobo: kobo}, nil
}

func runSend(cmd *cobra.Command, app *App, o sendOptions) error {
	ctx := cmd.Context()
	req, err := o.check()
	if err != nil {
		return err
	}
	seed, err := seedFlag(app, cmd, o.seed)
	if err != nil {
		return err
	}
	out, p := app.Env.Stdout, app.palette()
	c := &client.Client{
		URLs:     []string{o.url},
		Token:    users[strings.ToLower(o.as)].token,
		HTTP:     client.NewHTTP(o.timeout, nil),
		Attempts: o.attempts,
		Rand:     rand.New(rand.NewPCG(seed, 0x73656e64)),
		OnAttempt: func(a client.Attempt) {
			line := fmt.Sprintf("attempt %d: ", a.N)
			if a.Err != nil {
				line += p.warn.Sprint("network error: " + client.Explain(a.Err))
			} else {
				replayed := "no"
				if a.Response.Replayed {
					replayed = "yes"
				}
				line += fmt.Sprintf("%d %s, replayed: %s", a.Response.Status, http.StatusText(a.Response.Status), replayed)
				if code := a.Response.Code(); code != "" {
					line += " (" + code + ")"
				}
			}
			if a.Retry {
				line += ", will retry in " + humanDuration(a.Wait)
			}
			fmt.Fprintln(out, line)
		},
	}
	in := c.NewIntent(req)
	if o.key != "" {
		in.Key = o.key
	}
	fmt.Fprintf(out, "%s sends %s to account %d · POST %s/transfers · Idempotency-Key %s\n",
		holderOf(users[strings.ToLower(o.as)].account), bank.Naira(req.AmountKobo), req.To, strings.TrimRight(o.url, "/"), in.Key)
	res, err := c.Send(ctx, in)
	if err != nil {
		return err
	}
	base := strings.TrimRight(o.url, "/")
	token := users[strings.ToLower(o.as)].token
	switch res.Kind {
	case client.OK:
		fmt.Fprintf(out, "%s %s\n", p.ok.Sprint("app shows:"), res.Response.Body)
		printBalances(ctx, app, base)
		return nil
	case client.Rejected:
		var prob struct {
			Detail  string `json:"detail"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(res.Response.Body, &prob)
		why := prob.Detail
		if why == "" {
			why = prob.Message
		}
		fmt.Fprintf(out, "%s %d %s: %s\n", p.bad.Sprint("refused:"), res.Response.Status, res.Response.Code(), why)
		printBalances(ctx, app, base)
		return errFailed
	}
	if allRefused(res.Attempts) {
		// A refused connection carried nothing: no server, so no money moved.
		fmt.Fprintf(out, "%s every attempt's connection was refused: nothing was sent, and no money moved.\n", p.bad.Sprintf("no server at %s:", base))
		fmt.Fprintln(out, "Start one with 'bank-sim serve' (or point --url at yours), then send again.")
		return errFailed
	}
	fmt.Fprintf(out, "%s the outcome is unknown after %d attempts: the transfer may or may not have happened.\n",
		p.warn.Sprint("pending —"), len(res.Attempts))
	fmt.Fprintf(out, "Resolve it (the token is needed: keys belong to their user):\n  curl -H 'Authorization: Bearer %s' '%s/transfers?key=%s'\n", token, base, in.Key)
	fmt.Fprintf(out, "or send again with --key %s (safe: the server will not move the money twice).\n", in.Key)
	return errFailed
}

// allRefused reports whether every attempt failed to connect at all.
func allRefused(attempts []client.Attempt) bool {
	for _, a := range attempts {
		if a.Err == nil || !errors.Is(a.Err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return len(attempts) > 0
}

// printBalances prints the lesson's balances line, read through the API with
// each demo user's token (an account is visible to its owner only); it
// prints nothing when the server does not answer that way.
func printBalances(ctx context.Context, app *App, base string) {
	hc := client.NewHTTP(5*time.Second, nil)
	var parts []string
	var total int64
	for _, name := range []string{"ada", "bola", "chidi"} {
		u := users[name]
		req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/accounts/%d", base, u.account), nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+u.token)
		res, err := hc.Do(req)
		if err != nil {
			return
		}
		var acct struct {
			BalanceKobo *int64 `json:"balanceKobo"`
		}
		err = json.NewDecoder(res.Body).Decode(&acct)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || acct.BalanceKobo == nil {
			return
		}
		parts = append(parts, fmt.Sprintf("%s %s", holderOf(users[name].account), bank.Naira(*acct.BalanceKobo)))
		total += *acct.BalanceKobo
	}
	fmt.Fprintf(app.Env.Stdout, "balances: %s | total %s\n", strings.Join(parts, ", "), bank.Naira(total))
}
