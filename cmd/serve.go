package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

type serveOptions struct {
	addr         string
	listenAny    bool
	bug          string
	grace        time.Duration
	cleanupEvery time.Duration
	quiet        bool
	// hooks are for tests; the command line leaves them nil.
	hooks serveHooks
}

// serveHooks let a test watch serve from inside: where it listens, the
// dispatcher's moments, and what is left once it has stopped serving and
// before the bank is dropped.
type serveHooks struct {
	listening func(url string)
	dispatch  outbox.DispatchHooks
	stopped   func(ctx context.Context, db bank.DB, sms *outbox.Provider)
}

func newServeCmd(app *App) *cobra.Command {
	var o serveOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the transfer API over HTTP on a fresh bank",
		Long: `Serve POST /transfers — with bearer tokens, Idempotency-Key and problem+json
errors — on a fresh copy of the lesson's bank, so that curl, your own app or
your own retry library can be pointed at it. The bank is dropped on exit.

Routes: POST /transfers, GET /transfers/{id}, GET /transfers?key=K,
GET /accounts/{id}, GET /sms, GET /healthz.

Each transfer texts its sender ("You sent ₦10,000 to Bola"): the SMS is an
outbox row committed with the transfer, sent by a dispatcher to an
in-process SMS provider with the row's id as its idempotency key. The serve
log shows every SMS the provider accepts; GET /sms shows the caller theirs.

Stop with Ctrl-C or SIGTERM: requests in flight get --grace to finish; those
still running then are rolled back, their keys released, and answered 503
with Retry-After. Only then is the database closed; the ledger is printed,
and serve exits 130 (interrupted).

Every request is shown as it is answered — method and path, user, the
key's first 8 characters, status, whether it was a replay, and how long it
took — and after each new transfer the balances; --quiet turns that off.

Every --cleanup-every, the 24 h cleanup job deletes the keys older than 24 h
that are completed or whose lock has expired, and logs how many it deleted.

If the PostgreSQL that bank-sim started dies (kill -9, the OOM killer), it
is started again, recovering every committed transfer, and serve carries on
and says so; if it cannot be, serve stops with exit code 3 and says why.

--bug NAME serves with one of the lesson's server-side mistakes switched on
(see 'bank-sim list --bugs'), so that your own client or retry library can be
shown what it costs; a warning says so when the server starts. A client's
mistake (new-key-per-attempt) is refused: serve runs only the server.`,
		Example: `  bank-sim serve
  bank-sim serve --addr 127.0.0.1:9000
  bank-sim serve --addr 0.0.0.0:8080 --listen-any   reachable from other machines
  bank-sim serve --bug memory-keys                   a server that keeps its keys in a map`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return runServe(c.Context(), app, o) },
	}
	c.Flags().StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen on this `HOST:PORT` (port 0 picks a free one)")
	c.Flags().BoolVar(&o.listenAny, "listen-any", false, "allow an address other than loopback (the demo tokens are public!)")
	c.Flags().StringVar(&o.bug, "bug", "", "serve with one of the lesson's server-side mistakes (see 'bank-sim list --bugs')")
	c.Flags().DurationVar(&o.grace, "grace", api.DefaultGrace, "on Ctrl-C or SIGTERM, how long requests in flight may take to finish before they are rolled back and answered 503")
	c.Flags().DurationVar(&o.cleanupEvery, "cleanup-every", time.Hour, "run the cleanup of keys older than 24 h this often (0: never)")
	c.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "do not show each request and the balances after each transfer")
	_ = c.RegisterFlagCompletionFunc("bug", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		// The names serve takes, as its own check decides them.
		var names []string
		for _, b := range mistakes.All() {
			if _, err := parseServeBug(b.Name); err == nil {
				names = append(names, b.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// parseServeBug reads --bug for serve: any server-side bug. A client's
// mistake cannot be switched on in a server, and pretending would serve the
// correct handler under a bug's name.
func parseServeBug(name string) (*mistakes.Bug, error) {
	bug, err := parseBug(name)
	if err != nil || bug == nil {
		return bug, err
	}
	if bug.NewKeyPerAttempt || bug.NewKeyAfterServerError {
		return nil, usageError("--bug %s is a client's mistake, not the server's: serve runs only the server, and your client decides its keys. See it with: bank-sim chaos --bug %s, or bank-sim scenario --all --bug %s", name, name, name)
	}
	if bug.AsyncReplication {
		return nil, usageError("--bug %s is the database's mistake, not the server's: serve runs on one PostgreSQL with no standby to fail over to. See it with: bank-sim scenario failover --bug %s, or bank-sim chaos --failover --bug %s", name, name, name)
	}
	if o := bug.Outbox; o.PublishInTransaction || o.PublishAfterCommit || o.NoEventForOwnAccounts || o.NoDedup || o.MarkerAfterEffect || o.OffsetBeforeEffect || o.LockReleaseWithoutToken || o.LockGetThenSet || o.ShipReadThenWrite {
		return nil, usageError("--bug %s is in a part serve does not run: serve sends each transfer's SMS through its outbox, and has no message log, consumer, external lock or orders. See it with: bank-sim scenario --all --bug %s", name, name)
	}
	return bug, nil
}

// dispatchEvery is how often serve's dispatcher drains the outbox.
const dispatchEvery = 100 * time.Millisecond

// checkAddr refuses a non-loopback address unless asked: the demo tokens
// are printed for anyone to read, so the bank must not be reachable by
// other machines by accident.
func checkAddr(addr string, listenAny bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError("--addr %q: %s (want HOST:PORT, e.g. 127.0.0.1:8080)", addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usageError("--addr %s: the port must be a number from 0 to 65535 (0 picks a free one)", addr)
	}
	if listenAny {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usageError("--addr %s is not a loopback address; anyone who can reach it can move the demo money with the printed tokens. Add --listen-any if that is what you want", addr)
}

func runServe(ctx context.Context, app *App, o serveOptions) error {
	if err := checkAddr(o.addr, o.listenAny); err != nil {
		return err
	}
	if o.grace < 0 {
		return usageError("--grace %s: want a duration of 0 or more, e.g. 10s", o.grace)
	}
	if o.cleanupEvery < 0 {
		return usageError("--cleanup-every %s: want a duration, e.g. 1h, or 0 for never", o.cleanupEvery)
	}
	bug, err := parseServeBug(o.bug)
	if err != nil {
		return err
	}
	out, p := app.Env.Stdout, app.palette()
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	db, err := banks.OnServer(srv, banks.Options{}).NewBank(ctx, "serve")
	if err != nil {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	defer db.Close()

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("cannot listen on %s: %w", o.addr, err)}
	}
	url := "http://" + ln.Addr().String()
	// Stopping cuts the handlers' work short when the grace period ends.
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	h := &idem.Handler{DB: db.Pool, Store: &idem.Store{}, Stopping: stopping}
	var flaws outbox.Flaws
	var apiFlaws api.Flaws // a mistake of the HTTP layer, as chaos --http serves it
	if bug != nil {
		if err := bug.ApplySchema(ctx, db.Pool); err != nil {
			return &ExitError{Code: ExitDatabase, Err: err}
		}
		bug.Apply(h)
		flaws = bug.Outbox
		apiFlaws = bug.API
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(app.Env.Stderr, "bank-sim serve: "+format+"\n", args...)
	}
	// Each transfer commits an SMS row in its outbox; the dispatcher sends
	// it to the in-process provider, which logs every message it accepts.
	sms := outbox.NewProvider(0)
	sms.OnAccept(func(m outbox.SMS) {
		logf("SMS %d to %s: %q (transfer %d)", m.ID, holderOf(m.UserID), m.Text, m.TransferID)
	})
	h.Effects = &outbox.Effects{DB: db.Pool, SMS: sms, Flaws: flaws, Note: logf}
	dispatcher := &outbox.Dispatcher{DB: db.Pool, Name: "serve", SMS: sms, Flaws: flaws, Hooks: o.hooks.dispatch}
	var handler http.Handler = api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens(), Flaws: apiFlaws, Log: logf, SMS: sms})
	if !o.quiet {
		handler = api.LogRequests(handler, api.DemoTokens(), nil, requestLog(app, db.Pool))
	}
	var fresh freshConns
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ConnState:         fresh.track,
	}

	fmt.Fprintf(out, "bank-sim %s serving the transfer API on %s\n", version(), p.bold.Sprint(url))
	printWrapped(out, app.describe(srv)+", database "+db.Name+" (dropped on exit)", app.Env.Width, p.dim)
	if bug != nil {
		// On both streams: whoever reads either must not mistake this
		// server for a correct one.
		warning := fmt.Sprintf("WARNING: this server runs with a known mistake, --bug %s: %s. %s.", bug.Name, bug.Mistake, bug.Consequence)
		fmt.Fprintln(out, p.bad.Sprint(warning))
		fmt.Fprintln(app.Env.Stderr, "bank-sim serve: "+warning)
	}
	fmt.Fprintln(out, "demo bearer tokens:")
	toks := api.DemoTokens()
	names := make([]string, 0, len(toks))
	for t := range toks {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool { return toks[names[i]] < toks[names[j]] })
	for _, t := range names {
		fmt.Fprintf(out, "  %-12s %s (account %d)\n", t, holderOf(toks[t]), toks[t])
	}
	fmt.Fprintln(out, "try (run it twice: the second is a replay; change the key for a new transfer):")
	fmt.Fprintf(out, "  curl -i -X POST %s/transfers \\\n", url)
	fmt.Fprintf(out, "    -H 'Authorization: Bearer token-ada' \\\n")
	fmt.Fprintf(out, "    -H 'Idempotency-Key: %s' \\\n", client.NewUUID())
	fmt.Fprintf(out, "    -H 'Content-Type: application/json' \\\n")
	fmt.Fprintf(out, "    -d '{\"from\":1,\"to\":2,\"amountKobo\":1000000}'\n")
	printLedger(ctx, app, db.Pool)
	fmt.Fprintf(out, "%s\n", p.dim.Sprintf("each transfer texts its sender through the outbox (drained every %s); GET /sms shows you yours", dispatchEvery))
	if o.cleanupEvery > 0 {
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("the cleanup job runs every %s (keys older than %s)", scenarios.Dur(o.cleanupEvery), scenarios.Dur(idem.DefaultRetention)))
	}
	fmt.Fprintln(out, p.dim.Sprint("Ctrl-C to stop"))

	cleanupCtx, stopCleanup := context.WithCancel(context.WithoutCancel(ctx))
	cleanupDone := make(chan struct{})
	go func() {
		defer close(cleanupDone)
		cleanupLoop(cleanupCtx, h.Store, db.Pool, o.cleanupEvery, logf)
	}()
	defer func() { stopCleanup(); <-cleanupDone }()

	dispatchCtx, stopDispatch := context.WithCancel(context.WithoutCancel(ctx))
	dispatchDone := make(chan struct{})
	go func() {
		defer close(dispatchDone)
		dispatcher.Run(dispatchCtx, dispatchEvery, quietRepeats("outbox", logf, time.Now, 10*time.Second))
	}()
	defer func() { stopDispatch(); <-dispatchDone }()

	// If the embedded PostgreSQL dies, its supervisor starts it again and
	// says so (the pool reconnects; requests in between fail); if it
	// cannot, serve stops: a bank without a database could only answer 500.
	srv.Notify(func(msg string) { logf("%s", msg) })
	serveErr := make(chan error, 1)
	go func() { serveErr <- api.Serve(hs, ln) }()
	if o.hooks.listening != nil {
		o.hooks.listening(url)
	}
	select {
	case err := <-serveErr:
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("serving: %w", err)}
	case <-srv.Lost():
		_ = hs.Close()
		return &ExitError{Code: ExitDatabase, Err: fmt.Errorf("serve stopped: %s. The bank went down with it; nothing is left running, and the next bank-sim run drops what is left of the bank's database", strings.TrimRight(srv.LostReason(), "."))}
	case <-ctx.Done():
	}

	// The database goes only after every handler has returned: requests in
	// flight finish within the grace period, or are rolled back, their keys
	// released, and answered 503.
	fmt.Fprintf(out, "stopping: requests in flight have %s to finish\n", scenarios.Dur(o.grace))
	fresh.stop()
	cut, err := api.Drain(hs, o.grace, stop)
	if cut {
		fmt.Fprintln(out, "the grace period ended: requests still running were rolled back, their keys released, and answered 503 with Retry-After")
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		// Some handler ignored the stop (a --bug that works on the request's
		// context): closing the connections ends the requests' contexts.
		logf("shutdown: %v; closing the connections", err)
		_ = hs.Close()
	}
	stopCleanup()
	<-cleanupDone
	// The dispatcher stops only now that no transfer commits any more, and
	// gives back the rows it had claimed and not sent.
	stopDispatch()
	<-dispatchDone
	lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every transfer that committed before the stop gets its SMS: the last
	// drain takes every unsent row, one whose claim a stopped dispatcher
	// still holds too, rather than leave it for a dispatcher that will not
	// come. What it cannot send is named before the bank goes with it.
	if _, err := dispatcher.Final(lctx); err != nil {
		logf("outbox: the last drain: %v", err)
	}
	if left, err := outbox.Unsent(lctx, db.Pool); err != nil {
		logf("outbox: %v", err)
	} else if len(left) > 0 {
		logf("outbox: %d rows could not be sent and are dropped with the bank:", len(left))
		for _, r := range left {
			logf("  outbox row %d (%s to %s for transfer %d): %q", r.ID, r.Kind, holderOf(r.UserID), r.TransferID, r.Payload)
		}
	}
	if o.hooks.stopped != nil {
		o.hooks.stopped(lctx, db.Pool, sms)
	}
	printLedger(lctx, app, db.Pool)
	fmt.Fprintf(out, "SMS sent: %d\n", len(sms.Messages()))
	if srv.Embedded() {
		fmt.Fprintln(out, "stopped; the bank is dropped and PostgreSQL stops")
	} else {
		// Not ours to stop: only the bank's database goes.
		fmt.Fprintln(out, "stopped; the bank's database is dropped (your PostgreSQL keeps running)")
	}
	// A signal stopped the server: exit 130, as for every command.
	return ctx.Err()
}

// freshConns are the connections that have not sent a request yet: a
// browser opens one or two ahead of time, and a keep-alive client may
// have one open. http.Server.Shutdown counts such a connection as idle only
// once it is 5 s old, so one left open by a browser held serve for up to
// 5 s after Ctrl-C. They carry no request, so at the stop they are closed
// at once, as Shutdown closes idle keep-alive connections: a request that
// was about to be sent on one fails to connect and is retried, and no
// handler is cut short. A connection whose request has begun is Active and
// is left to the grace period.
type freshConns struct {
	mu       sync.Mutex
	conns    map[net.Conn]bool
	stopping bool
}

// track is the server's ConnState hook.
func (f *freshConns) track(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case state == http.StateNew && f.stopping:
		// Accepted as the listener closed.
		_ = c.Close()
	case state == http.StateNew:
		if f.conns == nil {
			f.conns = map[net.Conn]bool{}
		}
		f.conns[c] = true
	default:
		delete(f.conns, c)
	}
}

// stop closes every connection still waiting for its first request, and
// every one accepted from now on.
func (f *freshConns) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopping = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

// cleanupLoop runs the 24 h cleanup job every interval (never when 0) until
// ctx ends, and logs what each run deleted.
// quietRepeats returns an error logger for a loop that retries every few
// milliseconds: while PostgreSQL is down the dispatcher fails ten times a
// second with the same error, and a log of those buries everything else.
// An error is logged when it first appears or changes; the same one again
// only once per every, with how many times it came.
func quietRepeats(what string, logf func(string, ...any), now func() time.Time, every time.Duration) func(error) {
	var last string
	var at time.Time
	n := 0
	return func(err error) {
		msg := err.Error()
		switch {
		case msg != last:
			last, at, n = msg, now(), 0
			logf("%s: %s", what, msg)
		case now().Sub(at) >= every:
			logf("%s: %s (again, %d times in %s)", what, msg, n+1, now().Sub(at).Round(time.Second))
			at, n = now(), 0
		default:
			n++
		}
	}
}

func cleanupLoop(ctx context.Context, store *idem.Store, db bank.Querier, every time.Duration, logf func(string, ...any)) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		keys, err := store.Cleanup(cctx, db, idem.DefaultRetention, time.Now())
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			logf("cleanup: %v", err)
		default:
			logf("cleanup: deleted %d keys older than %s (completed, or their lock expired)", len(keys), idem.DefaultRetention)
		}
	}
}

// answerWidth is the request log's answer column: wide enough for the
// longest answer it prints, a status and the longest error code
// ("400 idempotency_key_required"), so that no code pushes the columns
// after it out of line.
var answerWidth = func() int {
	w := len("201 transfer 1000000")
	for _, code := range []string{
		bank.CodeInvalidRequest, bank.CodeInvalidAccount, bank.CodeInvalidAmount, bank.CodeSameAccount,
		bank.CodeAccountNotFound, bank.CodeAccountNotActive, bank.CodeRecipientUnavailable, bank.CodeInsufficientFunds,
		idem.CodeKeyRequired, idem.CodeKeyReused, idem.CodeInProgress, idem.CodeInternal,
		api.CodeUnauthorized, api.CodeNotFound, api.CodeMethodNotAllowed, api.CodeUnsupportedMedia,
		api.CodeBodyTooLarge, api.CodeUnknownKey, api.CodeInternal, api.CodeUnavailable, api.CodeDuplicate,
	} {
		w = max(w, len("400 ")+len(code))
	}
	return w
}()

// requestLog prints each request as serve answers it, and the balances
// after each new transfer, so that a live demo shows the server's side.
func requestLog(app *App, db bank.DB) func(api.Access) {
	var mu sync.Mutex
	p := app.palette()
	return func(a api.Access) {
		mu.Lock()
		defer mu.Unlock()
		user := "-"
		if a.User != 0 {
			user = strings.ToLower(holderOf(a.User))
		}
		key := "no key"
		if a.Key != "" {
			key = string([]rune(a.Key)[:min(8, len([]rune(a.Key)))])
		}
		answer := fmt.Sprintf("%d", a.Status)
		switch {
		case a.TransferID != 0:
			answer += fmt.Sprintf(" transfer %d", a.TransferID)
		case a.Code != "":
			answer += " " + a.Code
		}
		replayed := "new"
		if a.Replayed {
			replayed = "replay"
		}
		if a.Method != "POST" {
			replayed = ""
			if a.Key == "" {
				key = ""
			}
		} else if a.Status == 401 || a.Status == 413 || a.Status == 415 || a.Code == "idempotency_key_required" {
			replayed = "" // refused before the key store
		}
		style := colorer(p.ok)
		if a.Status >= 400 {
			style = p.warn
		}
		fmt.Fprintf(app.Env.Stdout, "%s %-4s %-12s %-5s %-8s %s %-6s %s\n", p.dim.Sprint(app.Env.Now().Format("15:04:05")),
			a.Method, truncate(a.Path, 12), user, key, style.Sprint(pad(answer, answerWidth)), replayed, p.dim.Sprint(humanDuration(a.Duration)))
		if a.Method == "POST" && a.Status == 201 && !a.Replayed {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if l, err := bank.ReadLedger(ctx, db); err == nil {
				fmt.Fprintf(app.Env.Stdout, "         %s\n", p.bold.Sprint(l.Line()))
			}
		}
	}
}

func printLedger(ctx context.Context, app *App, db bank.DB) {
	l, err := bank.ReadLedger(ctx, db)
	if err != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim serve: %v\n", err)
		return
	}
	fmt.Fprintln(app.Env.Stdout, l.Line())
}

func holderOf(user int64) string {
	for _, a := range bank.LessonAccounts {
		if a.OwnerID == user {
			return strings.Fields(a.Holder)[0]
		}
	}
	return fmt.Sprintf("user %d", user)
}
