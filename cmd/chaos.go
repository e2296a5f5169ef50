package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/internal/termtext"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
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
	failover    bool
	replication string
	// failoverCmd, expectFailover and failoverTimeout are a failover of
	// the team's own cluster at --database-url (chaos/ha.RunExternal).
	failoverCmd     string
	expectFailover  bool
	failoverTimeout time.Duration
	// partition is --partition app|standby; cuts, cutFor and cutAt shape
	// an app partition's cuts.
	partition string
	cuts      int
	cutFor    time.Duration
	cutAt     string
	loss      float64
	delay     time.Duration
	// targets, when given, are someone else's transfer API (chaos --target),
	// described by the probe's flags.
	targets []string
	amount  string
	targetFlags
	// planned is what a target run's plan listed as "cannot" check; the
	// report refers to it rather than listing it twice.
	planned  []chaos.Unchecked
	det      bool
	shrink   bool
	recipe   string
	seeds    string
	junit    string
	parallel int
	// httpEvery is --http-every N: every N-th seed of a campaign goes
	// over HTTP, as a free run.
	httpEvery int
	// shard is --shard K/N: this machine's share of the campaign;
	// campaignOut is where its results go, for check --merge.
	shard       string
	campaignOut string
	// html is --html FILE: the run's (or the campaign's) report.
	html string
}

func newChaosCmd(app *App) *cobra.Command { return newChaosCmdWith(app, runChaos) }

// newChaosCmdWith is chaos with runF in place of runChaos: a test reads
// the options a command line gives.
func newChaosCmdWith(app *App, runF func(*cobra.Command, *App, chaosOptions) error) *cobra.Command {
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

With --failover the run has a primary and a streaming standby of its own,
reached through one multi-host URL, and fails over once: as the seeded
intent starts (printed: "failover at intent N") the standby stops
receiving; once the primary has made 3 commits the standby lacks it is
killed with SIGKILL, the standby is promoted, and the pool reconnects to
it. --replication async (PostgreSQL's default) loses acknowledged transfers
and their keys (acknowledged-missing, key-lost); --replication sync loses
none. A seed repeats the intents, the faults and the failover intent, not
how much is lost; it cannot be --deterministic.

On your own cluster, give --database-url with its hosts and
target_session_attrs=read-write (any order: bank-sim uses the primary it
reached for everything it creates), or the one address in front of it.
On any server it did not start, bank-sim watches the primary all run
(host and timeline) and reports any change: from which host to which, the
unavailability, the acknowledged transfers and keys lost across it.
--failover-cmd CMD runs your own failover command at the seeded intent
(bounded by --failover-timeout, its output kept); --expect-failover waits
for one that someone else causes. Healing waits for the new primary.

With --partition (root, iproute2) the network is the kernel's, Jepsen-style:
each copy of the server runs in a network namespace the run makes, reached
over one veth link and reaching PostgreSQL over another, and at intents the
seed picks (--cuts, 3) the links to PostgreSQL go down for --cut-for (4s):
right after the first commit once the intent has started (--cut-at commit,
the default: what a server does after its COMMIT meets the cut) or as it
starts (--cut-at intent). A cut drops packets in silence: requests time out,
and a COMMIT PostgreSQL received has its answer lost. --loss PERCENT drops
that share of the packets each way all along (nftables); --delay needs
the kernel's sch_netem. The report says when each cut struck and healed and
what it cost. A seed repeats the intents at which the cuts start, not the
moment they land. The namespaces are removed at the end, and by 'bank-sim
prune' if the run is killed. --failover --partition=standby cuts the
primary off from its standby instead (the link their replication crosses
goes down) before the failover.

Every intent is recorded: its key, each attempt, what the client saw. An
auditor reads every balance in one snapshot while clients run. Before
healing, the keys in progress are counted against the holders still alive.
Healing stops the faults, moves the clock past every lock, retries every
unknown intent with its own key, and wakes the silent servers; then the
cleanup job runs and some intents are sent once more. The checker verifies
the history (money, answers against the lesson's rules, replays byte for
byte, keys) and counts the defence paths the run took and the faults that
fired.

With --target URL the seeded intents go to someone else's transfer API
instead — your server.js, a team's staging service, bank-sim serve — through
bank-sim's fault proxy, in the contract and with the users and balance
sources of 'bank-sim probe' (the same flags). Only the network's faults can be
injected into a server that is not bank-sim's: lose-response, drop-request
(a reset), late (the client times out), slow, duplicate copies, disconnect;
the workload adds keys reused for another amount or recipient, another user
with the same key, requests sent without their key, and retries with the
body's members in another order.
crash-after-claim, fail-before-commit, clock-jump,
deadlock, expire-mid-write, freeze and the side effects' faults happen
inside a server and are not injected. The history is checked by the rules
a black box allows — at most one transfer per key and no transfer told to
two intents (from the answers' transfer ids), answers the contract allows,
replays, every intent settled, a request without a key refused (no-key), a
retry in other bytes answered as the first (reordered-body-refused), and
with --balances-url or --database-url and --balances-sql the money: total
conserved, no negative balance, each account moved by exactly the
acknowledged transfers — and the report says which rules could not be
checked. A target off this machine is refused unless --allow-remote; the
money it will move is stated before it starts, and --dry-run prints the plan
and sends nothing. A target that cannot be reached is exit 3.

What a seed repeats. The workload and the faults are drawn from --seed
alone: the same seed gives the same intents, the same fault on every
attempt, the same server copy, on any machine. In a free run (the default)
it does not repeat the interleaving: which client's statement reaches
PostgreSQL first is Go's scheduler's and the machine's doing, so the counts
differ from run to run, and a race that broke a rule once may not come back.

With --deterministic every client, and every goroutine a fault starts, is a
task of a seeded scheduler that lets one task go at a time, at each SQL
statement, attempt, backoff and wait, with the real PostgreSQL in the loop:
a statement that must wait for another task's lock is cancelled and sent
again once that task's transaction has ended; deadlocks are found by the
scheduler; audits come every 500 steps, and the history counts steps, not
time. The same seed and flags give the same history, byte for byte, on any
machine: the summary prints its SHA-256. It costs throughput (one statement
at a time). It needs --intents, and cannot go over --http or with
--kill-postgres, whose sockets and SIGKILL run on real time. The outbox's
dispatchers and the consumer are tasks too, with their faults, each
statement, SMS and event a step.

--shrink (deterministic) turns a failing run into a recipe: the smallest
run it finds that still breaks the same rule — fewer intents, clients,
servers, dispatchers, attempts and accounts, fewer and simpler faults (the
side effects' as the decisions that fired), and the default schedule
(each task runs until it must wait) with only the preemptions the failure
needs — printed so that a person reads it in a minute. --save-recipe FILE
writes it as JSON; 'bank-sim scenario --recipe FILE' replays it as a story
with the usual checks, the same way every time: a chaos finding becomes a
regression test.

--seeds 1-100 runs a campaign: every seed with the same flags, --parallel
at a time, with a progress bar on a terminal and a line on stderr per tenth
of the seeds otherwise; then a table (per seed: intents, faults fired,
unknown outcomes, verdict, steps, history hash), and the first failing
seed, shrunk to a recipe. --junit FILE writes one test case per seed, for
CI. Every 4th seed of the list (--http-every N: the N-th, the 2N-th, …; 0
for none) goes over HTTP, as --http does, so that the HTTP layer (api/,
the fault proxies, the retrying client), which no run in process meets,
meets the faults too; the others are deterministic. A seed over HTTP is a
free run: it repeats its intents and faults, not its interleaving, so its
line has no steps and no history hash, and to be shrunk it runs again as
its deterministic twin in process, which is shrunk only if it breaks a
rule too (otherwise the mistake shows over HTTP only, and there is no
recipe). A campaign judges coverage over all its seeds: a seed that
never reached a rare defence path broke no rule and is no failure (its line
names what it missed; JUnit marks it skipped); the campaign is INCONCLUSIVE
only when no seed reached some defence, and says which.

--shard K/N runs one machine's share of the campaign (every N-th seed of
the list, from the K-th) and --campaign-out FILE saves its results; 'bank-sim
check --merge FILE…' combines the shards' files into the campaign's table,
JUnit report, first failing seed's recipe and exit code, as if one machine
had run every seed. A shard exits 1 when one of its seeds broke a rule, and
leaves coverage to the merge.

--html FILE writes a report to open in a browser, one file that needs
nothing else: the violations first, each with every attempt of the intents
involved; a timeline of every attempt (a lane per client and per server
copy, faults where they struck); throughput and latency over time, with
the faults and the audits' snapshots; the coverage table. A campaign's
report has a row per seed, linking to its details.

Exit code 0 when the run is VALID (no rule broken, every defence
exercised), 1 on any violation, 4 when it is INCONCLUSIVE (no rule broken,
but some defence never exercised, some fault never fired, or the side
effects' dispatchers or consumer hit errors that no outage of the run
explains, such as a missing table), 2 for a usage error, 3 when PostgreSQL
is unavailable. A campaign exits 1 if any seed is INVALID (or could not
run), else 4 if its seeds together never exercised some defence or one
seed's workers hit such errors, else 0.`,
		Example: `  bank-sim chaos --seed 42
  bank-sim chaos --clients 16 --intents 10000 --accounts 3
  bank-sim chaos --duration 30s --faults lose-response=0.2,duplicate=0.1
  bank-sim chaos --http --clients 8 --intents 2000
  bank-sim chaos --kill-postgres --intents 2000
  bank-sim chaos --failover --seed 1 --intents 400    (then --replication sync)
  bank-sim chaos --partition --seed 7 --intents 200 --bug second-transaction    (root)
  bank-sim chaos --failover --partition=standby --replication sync    (root)
  bank-sim chaos --database-url 'host=h1,h2 port=5432,5432 user=bank dbname=postgres target_session_attrs=read-write' \
      --failover-cmd 'patronictl -c /etc/patroni.yml failover --force --candidate h2' --html drill.html --junit drill.xml
  bank-sim chaos --bug no-fencing --history run.json   then: bank-sim check run.json
  bank-sim chaos --target http://127.0.0.1:8080 --balances-url 'http://127.0.0.1:8080/accounts/{id}' --exact-replays
  bank-sim chaos --target http://127.0.0.1:3000 --lookup none --dry-run
  bank-sim chaos --deterministic --seed 7 --intents 400
  bank-sim chaos --bug read-compare-write --seed 7 --intents 400 --shrink --save-recipe r.json
      then: bank-sim scenario --recipe r.json
  bank-sim chaos --seeds 1-100 --intents 400 --junit chaos.xml --save-recipe first-failure.json
  bank-sim chaos --seeds 1-100 --intents 400 --http-every 0    (every seed deterministic, in process)
  bank-sim chaos --seeds 1-10000 --intents 400 --shard 2/8 --campaign-out shard-2.json
      then: bank-sim check --merge shard-*.json --junit chaos.xml`,
		Args: func(c *cobra.Command, args []string) error {
			// --partition takes its value after "=" only (it has a default):
			// "--partition standby" leaves "standby" an argument.
			if len(args) > 0 && c.Flags().Changed("partition") && (args[0] == chaos.PartitionApp || args[0] == chaos.PartitionStandby) {
				return usageError("write --partition=%s, with \"=\": --partition alone means app", args[0])
			}
			return cobra.NoArgs(c, args)
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if o.seeds != "" && c.Flags().Changed("deterministic") && !c.Flags().Changed("http-every") {
				// Asked for in so many words: every seed deterministic.
				o.httpEvery = 0
			}
			return runF(c, app, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.seed, "seed", "", "seed of the workload and the faults (and with --deterministic of the whole run); printed on each run; default: a new one")
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
	f.BoolVar(&o.failover, "failover", false, "run on a primary and a streaming standby that bank-sim starts, and fail over once at a seeded intent: the standby stops receiving, the primary is killed (SIGKILL), the standby promoted")
	f.StringVar(&o.replication, "replication", chaos.ReplicationAsync, "with --failover: how the standby is replicated, `async` (PostgreSQL's default: the primary acknowledges before the standby has it) or sync (each commit waits for the standby)")
	f.StringVar(&o.failoverCmd, "failover-cmd", "", "with --database-url on your cluster: run the team's own failover `CMD` (sh -c; patronictl failover --force …, pg_autoctl perform failover, a script) as the seeded intent starts, keep its output, and measure the change of primary")
	f.BoolVar(&o.expectFailover, "expect-failover", false, "with --database-url on your cluster: someone else fails the cluster over during the run; bank-sim watches for the new primary, keeps the workload going, and heals once it has seen it")
	f.DurationVar(&o.failoverTimeout, "failover-timeout", 2*time.Minute, "with --failover-cmd or --expect-failover: how long the command may run, and how long healing waits for the new primary")
	f.StringVar(&o.partition, "partition", "", "partition the network, Jepsen-style, in network namespaces the run makes (root): `app` (the default) puts each server copy in one and cuts them all off from PostgreSQL at seeded intents; standby (with --failover) cuts the primary off from its standby before the failover")
	f.Lookup("partition").NoOptDefVal = chaos.PartitionApp
	f.IntVar(&o.cuts, "cuts", 3, "with --partition app: how many times the app servers are cut off from PostgreSQL, at intents the seed picks")
	f.DurationVar(&o.cutFor, "cut-for", 4*time.Second, "with --partition app: how long each cut lasts")
	f.StringVar(&o.cutAt, "cut-at", "commit", "with --partition app: when each cut strikes: `commit` (right after the first transfer that commits once its intent has started: what a server does after its COMMIT meets the cut) or intent (as its intent starts, whatever is in flight)")
	f.Float64Var(&o.loss, "loss", 0, "with --partition app: drop this `PERCENT` of the packets between the app servers and PostgreSQL, each way, all along (nftables in the servers' namespaces; needs nft)")
	f.DurationVar(&o.delay, "delay", 0, "with --partition app: hold every packet between the app servers and PostgreSQL this long, each way (tc netem; needs a kernel with sch_netem)")
	f.StringArrayVar(&o.targets, "target", nil, "run against someone else's transfer API at this base `URL` (repeat for copies of one service), network faults only; the flags below describe it")
	f.StringVar(&o.amount, "amount", "100", "with --target: the smallest amount of a transfer, in naira (each is from it to twice it)")
	o.targetFlags.register(f)
	f.BoolVar(&o.det, "deterministic", false, "run every client as a task of a seeded scheduler: the same seed repeats the whole run, history byte for byte")
	f.BoolVar(&o.shrink, "shrink", false, "when the run breaks a rule, shrink it to the smallest run that still does, and print it as a recipe (implies --deterministic)")
	f.StringVar(&o.recipe, "save-recipe", "", "write the shrunk recipe as JSON to `FILE` (implies --shrink; replay it with 'bank-sim scenario --recipe FILE')")
	f.StringVar(&o.seeds, "seeds", "", "run a campaign: every seed of `LIST` (1-100, or 1,5,9), deterministically in process but every --http-every-th over HTTP, with a summary table")
	f.StringVar(&o.junit, "junit", "", "with --seeds: write a JUnit XML report to `FILE`, one test case per seed; with --failover-cmd or --expect-failover: the run, the command and each change of primary")
	f.IntVar(&o.parallel, "parallel", 2, "with --seeds: run up to `N` seeds at once")
	f.IntVar(&o.httpEvery, "http-every", chaos.CampaignHTTPEvery, "with --seeds: every `N`-th seed of the list (the N-th, the 2N-th, …) goes over HTTP as a free run, which repeats its intents and faults, not its interleaving; 0: every seed deterministic, in process")
	f.StringVar(&o.shard, "shard", "", "with --seeds: run only shard `K/N` of the campaign (every N-th seed, from the K-th); merge the shards with 'bank-sim check --merge'")
	f.StringVar(&o.campaignOut, "campaign-out", "", "with --seeds: write the campaign's results as JSON to `FILE`, for 'bank-sim check --merge'")
	addHTMLFlag(f, &o.html)
	groupFlags(c, chaosFlagGroups)
	_ = c.RegisterFlagCompletionFunc("bug", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return mistakes.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// chaosFlagGroups are chaos's flags as its help shows them: by what they
// are about, each group a screen at most.
var chaosFlagGroups = []flagGroup{
	{"Workload flags", []string{"seed", "intents", "duration", "clients", "accounts", "attempts", "bug"}},
	{"Fault flags", []string{"faults", "kill-postgres", "partition", "cuts", "cut-for", "cut-at", "loss", "delay"}},
	{"Cluster flags", []string{"servers", "http", "failover", "replication", "failover-cmd", "expect-failover", "failover-timeout"}},
	{"Determinism and campaign flags", []string{"deterministic", "shrink", "save-recipe", "seeds", "http-every", "parallel", "shard", "campaign-out"}},
	{"Target flags (with --target: someone else's transfer API)", []string{"target", "amount", "token", "account", "path", "key-header", "auth-header", "auth-scheme",
		"from-field", "to-field", "amount-field", "id-field", "balance-field", "replayed-header", "exact-replays", "lookup",
		"balances-url", "balances-field", "balances-sql", "key-refusal", "allow-remote", "dry-run"}},
	{"Target failure flags (with --target: what no client can cause: the database failing, a restart)", []string{"db-proxy", "lock-ttl", "restart", "restart-timeout", "wait-for"}},
	{"Output flags", []string{"json", "history", "html", "junit"}},
}

func parseBug(name string) (*mistakes.Bug, error) {
	if name == "" {
		return nil, nil
	}
	b, err := mistakes.Lookup(name)
	if err != nil {
		return nil, usageError("--bug: %v", unknownName("bug", name, mistakes.Names(), "bank-sim list --bugs"))
	}
	return &b, nil
}

func (o chaosOptions) config(app *App, c *cobra.Command) (chaos.Config, error) {
	seed, err := seedFlag(app, c, o.seed)
	if err != nil {
		return chaos.Config{}, err
	}
	if o.recipe != "" {
		o.shrink = true
	}
	if o.shrink || o.seeds != "" {
		o.det = true
	}
	switch {
	case c.Flags().Changed("http-every") && o.seeds == "":
		return chaos.Config{}, usageError("--http-every says which seeds of a campaign go over HTTP: give --seeds too (one run over HTTP: --http)")
	case o.httpEvery < 0:
		return chaos.Config{}, usageError("--http-every %d: give 0 (every seed deterministic, in process) or N, for every N-th seed over HTTP", o.httpEvery)
	case o.seeds != "" && o.http:
		return chaos.Config{}, usageError("--http with --seeds: a campaign sends every N-th seed over HTTP (--http-every N, %d unless given); --http-every 1 sends every seed", chaos.CampaignHTTPEvery)
	case o.seeds != "" && c.Flags().Changed("deterministic") && o.httpEvery > 0:
		return chaos.Config{}, usageError("--deterministic --http-every %d: a seed over HTTP is a free run; give --http-every 0 (or leave out --deterministic)", o.httpEvery)
	}
	what := "--deterministic"
	switch {
	case o.seeds != "":
		what = "--seeds (a campaign)"
	case o.shrink:
		what = "--shrink (which is deterministic)"
	}
	switch {
	case o.det && o.http:
		return chaos.Config{}, usageError("%s cannot go over --http: the sockets, proxies and HTTP servers run on real time, which no scheduler orders (an --http run repeats its intents and faults, not its interleaving)", what)
	case o.det && o.failover:
		return chaos.Config{}, usageError("%s cannot be combined with --failover: when the primary dies, and what its standby had received, depend on real time (a --failover run repeats its intents, faults and failover intent, not what it loses)", what)
	case o.det && o.partition != "":
		return chaos.Config{}, usageError("%s cannot be combined with --partition: when a cut lands and what it catches depend on real time (a --partition run repeats its intents, faults and the intents at which the cuts start, not what they catch)", what)
	case o.det && o.kill:
		return chaos.Config{}, usageError("%s cannot be combined with --kill-postgres: when the SIGKILL lands and what the restarted server still has depend on real time", what)
	case o.det && o.duration > 0:
		return chaos.Config{}, usageError("%s needs --intents, not --duration: how many intents fit in a duration depends on the machine", what)
	case o.seeds != "" && o.seed != "":
		return chaos.Config{}, usageError("give --seed or --seeds, not both")
	case o.seeds != "" && o.history != "":
		return chaos.Config{}, usageError("--history writes one run's history; a campaign (--seeds) runs many: repeat a seed with --deterministic --seed N --history FILE")
	case o.junit != "" && o.seeds == "" && o.failoverCmd == "" && !o.expectFailover:
		return chaos.Config{}, usageError("--junit writes a campaign's report, one test case per seed (give --seeds too), or a failover drill's (with --failover-cmd or --expect-failover)")
	case o.shard != "" && o.seeds == "":
		return chaos.Config{}, usageError("--shard runs one machine's share of a campaign: give --seeds too")
	case o.campaignOut != "" && o.seeds == "":
		return chaos.Config{}, usageError("--campaign-out writes a campaign's results: give --seeds too (one run's history is --history FILE)")
	case o.shard != "" && o.campaignOut == "":
		return chaos.Config{}, usageError("--shard %s: give --campaign-out FILE too: 'bank-sim check --merge' combines the shards' files", o.shard)
	case o.parallel < 1 || o.parallel > 16:
		return chaos.Config{}, usageError("--parallel %d: give 1 to 16", o.parallel)
	}
	if o.shard != "" {
		// Its form now, before anything runs; its N against the seeds
		// once they are read.
		if _, err := parseShard(o.shard, chaos.MaxCampaignSeeds); err != nil {
			return chaos.Config{}, err
		}
	}
	for _, f := range [][2]string{{"--save-recipe", o.recipe}, {"--junit", o.junit}, {"--campaign-out", o.campaignOut}, {"--html", o.html}} {
		if f[1] != "" {
			if err := checkWritableFlag(f[0], f[1]); err != nil {
				return chaos.Config{}, err
			}
		}
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
	if len(o.targets) > 0 {
		if o.partition != "" {
			return chaos.Config{}, usageError("--partition puts bank-sim's own app servers (or its standby) in network namespaces; a --target is someone else's server, which bank-sim cannot move: leave out one of them")
		}
		return o.targetConfig(app, c, seed, rates)
	}
	for _, name := range []string{"token", "account", "path", "key-header", "auth-header", "auth-scheme", "from-field", "to-field", "amount-field",
		"id-field", "balance-field", "replayed-header", "exact-replays", "lookup", "balances-url", "balances-field", "balances-sql", "allow-remote", "dry-run", "amount",
		"db-proxy", "lock-ttl", "restart", "restart-timeout", "wait-for"} {
		if c.Flags().Changed(name) {
			return chaos.Config{}, usageError("--%s describes a target: give it with --target URL", name)
		}
	}
	bug, err := parseBug(o.bug)
	if err != nil {
		return chaos.Config{}, err
	}
	if c.Flags().Changed("replication") && !o.failover {
		return chaos.Config{}, usageError("--replication says how the standby of a --failover run is replicated: give --failover too")
	}
	if o.failover {
		switch {
		case o.replication != chaos.ReplicationAsync && o.replication != chaos.ReplicationSync:
			return chaos.Config{}, usageError("--replication %q: give async or sync", o.replication)
		case o.kill:
			return chaos.Config{}, usageError("give --failover or --kill-postgres, not both: a failover kills the primary and promotes its standby; --kill-postgres restarts one server in place")
		case app.externalURL() != "":
			return chaos.Config{}, usageError("--failover runs on a primary and standby that bank-sim starts itself; it cannot fail over the server at --database-url / DATABASE_URL")
		}
	}
	plan, err := o.partitionPlan(app, c)
	if err != nil {
		return chaos.Config{}, err
	}
	if plan != nil && plan.Of == chaos.PartitionApp {
		o.http = true // the app servers in the namespaces are HTTP servers
	}
	if o.failoverCmd != "" || o.expectFailover {
		flag := "--failover-cmd"
		if o.failoverCmd == "" {
			flag = "--expect-failover"
		}
		switch {
		case app.externalURL() == "":
			return chaos.Config{}, usageError("%s is for your own cluster: give --database-url with its hosts, e.g. 'host=h1,h2 port=5432,5432 target_session_attrs=read-write …' (bank-sim's own primary and standby: --failover)", flag)
		case o.failoverCmd != "" && o.expectFailover:
			return chaos.Config{}, usageError("give --failover-cmd (bank-sim runs your failover command) or --expect-failover (someone else fails over), not both")
		case o.failover || o.kill:
			return chaos.Config{}, usageError("%s fails over your cluster at --database-url; --failover and --kill-postgres are for a PostgreSQL bank-sim starts itself", flag)
		case o.det || o.seeds != "":
			return chaos.Config{}, usageError("%s cannot be combined with %s: when the primary changes depends on real time", flag, what)
		case o.partition != "":
			return chaos.Config{}, usageError("%s cannot be combined with --partition", flag)
		case o.failoverTimeout <= 0:
			return chaos.Config{}, usageError("--failover-timeout %s: give a positive duration, like 2m", o.failoverTimeout)
		}
	}
	if o.kill && app.externalURL() != "" {
		return chaos.Config{}, usageError("--kill-postgres kills the PostgreSQL that bank-sim starts itself; it cannot kill the server at --database-url / DATABASE_URL")
	}
	if o.history != "" {
		if err := checkWritableFlag("--history", o.history); err != nil {
			return chaos.Config{}, err
		}
	}
	if bug != nil && bug.AsyncReplication && !o.failover {
		return chaos.Config{}, usageError("--bug %s is the database's mistake: it costs only when the primary dies and its standby is promoted; give --failover too (bank-sim chaos --failover --replication sync --bug %s)", bug.Name, bug.Name)
	}
	if o.failover && bug != nil && bug.AsyncReplication {
		o.replication = chaos.ReplicationAsync // the mistake is the replication (ha.RunPair does the same)
	}
	return chaos.Config{Seed: seed, Clients: o.clients, Intents: o.intents, Duration: o.duration,
		Accounts: o.accounts, Faults: rates, Instances: o.instances, MaxAttempts: o.maxAttempts, Bug: bug, HTTP: o.http, KillPostgres: o.kill,
		Failover: failoverFlag(o), Partition: plan, Deterministic: o.det}.WithDefaults(), nil
}

// failoverFlag is Config.Failover for the flags: the replication, with
// --failover.
func failoverFlag(o chaosOptions) string {
	if !o.failover {
		return ""
	}
	return o.replication
}

func runChaos(c *cobra.Command, app *App, o chaosOptions) error {
	cfg, err := o.config(app, c)
	if err != nil {
		return err
	}
	if cfg.Target != nil {
		return runChaosTarget(c, app, o, cfg)
	}
	if o.seeds != "" {
		return runCampaign(c, app, o, cfg)
	}
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · chaos · %s\n", version(), seedPromise(cfg))
	}
	if cfg.Failover != "" {
		return runChaosFailover(c, app, o, cfg)
	}
	if cfg.Partition != nil {
		return runChaosPartition(c, app, o, cfg)
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
	var h *chaos.History
	if !srv.Embedded() {
		// A server that is not bank-sim's may be a cluster's primary,
		// reached through several hosts or through one address (a virtual
		// IP) that moves: its primary is watched all along, so that a
		// change is reported whoever causes it.
		if !o.asJSON {
			switch {
			case o.failoverCmd != "":
				at := fmt.Sprintf("at intent %d", cfg.CrashIntent())
				if cfg.Intents <= 0 {
					at = fmt.Sprintf("after %s", cfg.CrashAfter().Round(time.Millisecond))
				}
				fmt.Fprintf(out, "failover-cmd %s: %s (at most %s)\n", at, o.failoverCmd, o.failoverTimeout)
			case o.expectFailover:
				fmt.Fprintf(out, "expecting a failover: healing waits at most %s for the new primary\n", o.failoverTimeout)
			}
		}
		h, err = ha.RunExternal(ctx, banks.OnServer(srv, banks.Options{}), cfg, opts, ha.ExternalOptions{WatchURL: srv.AdminURL(),
			FailoverCmd: o.failoverCmd, CmdTimeout: o.failoverTimeout, Expect: o.expectFailover, WaitTimeout: o.failoverTimeout})
	} else {
		h, err = chaos.RunOnWith(ctx, banks.OnServer(srv, banks.Options{}), cfg, opts)
	}
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return runFailed(fmt.Errorf("chaos run (seed %d): %w", cfg.Seed, err))
	}
	return o.verdict(app.Env, out, p, h, func(h *chaos.History) (*chaos.Recipe, error) {
		return shrinkRun(ctx, app, o, cfg, h, banks.OnServer(srv, banks.Options{}), !o.asJSON)
	})
}

// verdict checks the run's history, prints the result (and saves the
// history with --history), and returns the verdict's exit. shrink, when
// not nil, makes the recipe of a failing run for --shrink/--save-recipe.
func (o chaosOptions) verdict(env *Env, out io.Writer, p *palette, h *chaos.History, shrink func(*chaos.History) (*chaos.Recipe, error)) error {
	// The verdict first: a history that cannot be written must not cost it.
	var saveErr error
	if o.history != "" {
		saveErr = h.Save(o.history)
	}
	res := chaos.Check(h)
	var recipe *chaos.Recipe
	if shrink != nil && (o.shrink || o.recipe != "") && res.Verdict() == chaos.Invalid {
		var err error
		if recipe, err = shrink(h); err != nil {
			return err
		}
	}
	if o.asJSON {
		j := newChaosJSON(h.Seed, res)
		j.withHistory(h)
		j.Recipe = recipe
		j.FailoverCommand = h.FailoverCommand
		if err := writeJSON(out, j); err != nil {
			return err
		}
	} else {
		printChaosResult(out, p, h, res, o.planned)
		if o.history != "" && saveErr == nil {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("history written to %s (re-check it with: bank-sim check %s)", o.history, o.history))
		}
		if recipe != nil {
			printRecipe(out, p, recipe, o.recipe)
		} else if o.shrink || o.recipe != "" {
			fmt.Fprintf(out, "%s\n", p.dim.Sprint("nothing to shrink: the run broke no rule"))
		}
	}
	if o.html != "" {
		if err := writeHTML(env, o.html, chaosHTML(h, res, recipe)); err != nil {
			return err
		}
	}
	if o.junit != "" && o.seeds == "" {
		if err := writeJUnitSuite(o.junit, failoverJUnit(h, res)); err != nil {
			return &ExitError{Code: ExitFailed, Err: err}
		}
	}
	if saveErr != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("--history %s: cannot write it (%s)", o.history, plainIOError(saveErr))}
	}
	return verdictError(res)
}

// chaosHTML is the HTML report of one run's history, in the words the
// terminal report uses (a target's checks are its own).
func chaosHTML(h *chaos.History, res chaos.Result, recipe *chaos.Recipe) *htmlreport.Doc {
	res.Coverage = targetCoverage(h, res.Coverage)
	o := htmlreport.ChaosOptions{CheckTitle: checkTitle, Recipe: recipe}
	if h.Config.Target != nil {
		o.CheckTitle = targetCheckTitle
	} else {
		o.Repeat = chaosRepeat(h)
	}
	return htmlreport.Chaos(h, res, o)
}

// chaosRepeat is the command line that repeats h's run: every flag that
// changes the run, the terminal's "repeat with" and the HTML report's
// alike. A target's run (its URLs and contract) is the user's own command.
func chaosRepeat(h *chaos.History) string {
	cfg := h.Config
	s := fmt.Sprintf("bank-sim chaos --seed %d", h.Seed)
	if cfg.Target != nil {
		return s
	}
	if h.Deterministic != nil {
		s += " --deterministic"
	}
	if cfg.Intents == 0 && cfg.Duration > 0 {
		// A run for a time: --intents 0 would be refused.
		flags := campaignFlags(cfg)
		s += " --duration " + cfg.Duration.String() + flags[strings.Index(flags, " --clients"):]
	} else {
		s += campaignFlags(cfg)
	}
	if cfg.HTTP {
		s += " --http"
	}
	if cfg.Failover != "" {
		s += " --failover --replication " + cfg.Failover
	} else if cfg.KillPostgres {
		s += " --kill-postgres"
	}
	return s + partitionFlags(cfg)
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
	// Seed is a string: JSON numbers above 2^53 are rounded by JavaScript
	// and jq, and a rounded seed is another run.
	Seed    chaos.Seed `json:"seed"`
	Verdict string     `json:"verdict"`
	Valid   bool       `json:"valid"`
	// Missing lists the defences never exercised and the faults that never
	// fired (why a run is INCONCLUSIVE).
	Missing []string     `json:"missing"`
	Result  chaos.Result `json:"result"`
	// Deterministic is set for a deterministic run: its scheduler's steps
	// and the SHA-256 of its history, which the same seed repeats.
	Deterministic *chaos.Determinism `json:"deterministic,omitempty"`
	HistorySHA256 string             `json:"historySha256,omitempty"`
	// Recipe is the shrunk run (--shrink).
	Recipe *chaos.Recipe `json:"recipe,omitempty"`
	// FailoverCommand is the run's --failover-cmd, its output kept (the
	// change of primary it caused is in result.primaryChanges).
	FailoverCommand *chaos.FailoverCommand `json:"failoverCommand,omitempty"`
}

func newChaosJSON(seed uint64, res chaos.Result) chaosJSON {
	return chaosJSON{Seed: chaos.Seed(seed), Verdict: res.Verdict(), Valid: res.Verdict() == chaos.Valid,
		Missing: append([]string{}, res.Coverage.Missing()...), Result: res}
}

// withHistory adds what a deterministic history repeats.
func (j *chaosJSON) withHistory(h *chaos.History) {
	if h.Deterministic == nil {
		return
	}
	j.Deterministic = h.Deterministic
	j.HistorySHA256, _ = h.Hash()
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
	if cfg.Failover != "" {
		faults += fmt.Sprintf(" · failover at intent %d (%s replication): the standby stops receiving, the primary is killed (SIGKILL) once it has made %d commits the standby lacks, the standby is promoted",
			cfg.CrashIntent(), cfg.Failover, ha.StallCommits)
		if cfg.Intents <= 0 {
			faults = strings.Replace(faults, fmt.Sprintf("at intent %d", cfg.CrashIntent()), fmt.Sprintf("after %s", cfg.CrashAfter().Round(time.Millisecond)), 1)
		}
		if pl := cfg.Partition; pl != nil && pl.Of == chaos.PartitionStandby {
			faults = strings.Replace(faults, "the standby stops receiving", "the primary is cut off from its standby (a partition: the link their replication crosses goes down)", 1)
		}
	} else if cfg.KillPostgres {
		faults += " · PostgreSQL killed (SIGKILL) once and restarted"
	}
	faults += describePartition(cfg)
	s := fmt.Sprintf("%d clients · %s · %d accounts · %d servers %s · up to %d attempts\nfaults: %s\nbug: %s",
		cfg.Clients, what, cfg.Accounts, cfg.Instances, via, cfg.MaxAttempts, faults, bug)
	if floor := cfg.CoverageFloor(); floor > 0 {
		// Said before the run, not as an INCONCLUSIVE after it.
		s += fmt.Sprintf("\ncoverage: %d intents are too few to give every fault and defence its chance (this run may end INCONCLUSIVE); --intents %d or more can", cfg.Intents, floor)
	}
	return s
}

// printChaosResult prints the summary table, the checks, and the first and
// worst violation with the timeline of the intent involved. planned is what
// a target run's plan listed already as "cannot" (nil when no plan was
// printed, as for check): those rules are referred to, not listed again.
func printChaosResult(out io.Writer, p *palette, h *chaos.History, res chaos.Result, planned []chaos.Unchecked) {
	s := res.Stats
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "intents\t%d\t(%d ok, %d rejected, %d unknown after the fault phase → %d resolved by healing)\n",
		s.Intents, s.OK, s.Rejected, s.Healed, s.Resolved)
	fmt.Fprintf(tw, "attempts\t%d\t(%d replays, %d × 409, %d × 5xx)\n", s.Attempts, s.Replays, s.Conflicts, s.ServerErrors)
	if s.Keyless > 0 {
		fmt.Fprintf(tw, "without a key\t%d\t(%d refused, as they must be)\n", s.Keyless, s.KeylessRefused)
	}
	for k, c := range s.Causes {
		label := ""
		if k == 0 {
			label = "causes"
		}
		fmt.Fprintf(tw, "%s\t%d ×\t%s\n", label, c.Count, c.Cause)
	}
	for _, c := range s.Crashes {
		after := "on a timer"
		if c.AfterIntent >= 0 {
			after = fmt.Sprintf("as intent %d started", c.AfterIntent)
		}
		if line := c.FailoverLine(); line != "" {
			fmt.Fprintf(tw, "failover\t%s\n", line)
			continue
		}
		if c.Error != "" {
			fmt.Fprintf(tw, "postgres\tkilled with SIGKILL %s, at %s; restart failed: %s\n", after, time.Duration(c.AtNs).Round(time.Millisecond), c.Error)
			continue
		}
		fmt.Fprintf(tw, "postgres\tkilled with SIGKILL %s, at %s; back on the same data after %s\n", after,
			time.Duration(c.AtNs).Round(time.Millisecond), time.Duration(c.UpNs-c.AtNs).Round(time.Millisecond))
	}
	if fc := h.FailoverCommand; fc != nil {
		fmt.Fprintf(tw, "failover-cmd\t%s\n", fc.Line())
		for _, l := range lastLines(fc.Output, 5) {
			fmt.Fprintf(tw, "\t  | %s\n", l)
		}
	}
	switch {
	case len(res.PrimaryChanges) > 0:
	case h.FailoverCommand != nil:
		fmt.Fprintf(tw, "primary\tunchanged: the failover command changed no primary\n")
	case h.PrimaryWatched != nil:
		fmt.Fprintf(tw, "primary\tunchanged all run: %s\n", h.PrimaryWatched)
	}
	if pp := h.PastPlan; pp != nil {
		fmt.Fprintf(tw, "workload\t%s\n", pp.Line())
	}
	for _, pc := range res.PrimaryChanges {
		fmt.Fprintf(tw, "primary\tchanged: %s\n", pc.Line())
		for _, v := range pc.Crossing {
			fmt.Fprintf(tw, "\t  %s: %s\n", v.Kind, v.Detail)
		}
	}
	for _, cut := range h.Partitions {
		how := "as intent %d started"
		if pl := h.Config.Partition; pl != nil && pl.AfterCommit {
			how = "at the first commit after intent %d started"
		}
		fmt.Fprintf(tw, "partition\tapp servers cut off from PostgreSQL "+how+": at %s, healed at %s (%s); %d attempts begun during the cut got no final answer\n",
			cut.Intent, time.Duration(cut.CutNs).Round(time.Millisecond), time.Duration(cut.HealedNs).Round(time.Millisecond),
			time.Duration(cut.HealedNs-cut.CutNs).Round(time.Millisecond), cut.Failed(h))
	}
	if w := h.WorkerErrors; w != nil {
		fmt.Fprintf(tw, "side effects\t%s\n", w.Line())
		expected := 0
		for _, e := range w.First {
			if e.Expected {
				if expected++; expected > 1 {
					continue // one is enough to say what the outage did
				}
			}
			fmt.Fprintf(tw, "\t  %d × %s\n", e.Count, truncate(termtext.Escape(e.Message), 200))
		}
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
	switch {
	case h.Deterministic != nil && s.Duration == 0:
		// Re-checked offline: a deterministic history keeps no time.
	case h.Deterministic != nil:
		fmt.Fprintf(tw, "speed\t%.0f intents/s\t%.0f transfers/s (%s, deterministic: one statement at a time)\n", s.IntentsPerSecond, transfersPerSecond, s.Duration.Round(time.Millisecond))
	default:
		fmt.Fprintf(tw, "speed\t%.0f intents/s\t%.0f transfers/s (%s)\n", s.IntentsPerSecond, transfersPerSecond, s.Duration.Round(time.Millisecond))
	}
	if d := h.Deterministic; d != nil {
		hash, _ := h.Hash()
		fmt.Fprintf(tw, "history\tsha256 %s\t(%d scheduler steps; the same seed and flags give the same)\n", hash, d.Steps)
	}
	_ = tw.Flush()

	printCoverage(out, p, targetCoverage(h, res.Coverage))
	if len(res.Unchecked) > 0 {
		fmt.Fprintln(out)
		var listed, rest []chaos.Unchecked
		for _, u := range res.Unchecked {
			if slices.Contains(planned, u) {
				listed = append(listed, u)
			} else {
				rest = append(rest, u)
			}
		}
		label := "unchecked"
		if len(listed) > 0 {
			fmt.Fprintf(out, "%-9s %s\n", label, p.dim.Sprintf("the %d listed under “cannot” above", len(listed)))
			label = ""
		}
		printUnchecked(out, p, label, rest)
	}

	fmt.Fprintln(out)
	title := checkTitle
	if h.Config.Target != nil {
		title = targetCheckTitle
	}
	for _, c := range res.Checks {
		if c.Violations == 0 {
			fmt.Fprintf(out, "   %s %s\n", p.ok.Sprint("✓"), title(c.Kind))
		} else {
			fmt.Fprintf(out, "   %s %s: %d violation(s)\n", p.bad.Sprint("✗"), p.bad.Sprint(title(c.Kind)), c.Violations)
		}
	}
	switch res.Verdict() {
	case chaos.Valid:
		fmt.Fprintf(out, "\n%s %s\n", p.ok.Sprint("VALID"), p.dim.Sprintf("seed %d", h.Seed))
		return
	case chaos.Inconclusive:
		what := "what it never exercised"
		if len(res.Coverage.Unrecognised) > 0 {
			what = "what it never exercised, nor for answers it could not name"
		}
		if len(res.Coverage.Unexplained) > 0 {
			what += ", nor for side effects whose workers hit errors no outage of the run explains"
		}
		fmt.Fprintf(out, "\n%s no rule broken, but this run cannot vouch for %s:\n", p.bad.Sprint("INCONCLUSIVE"), what)
		for _, m := range res.Coverage.Missing() {
			// A worker's error quotes PostgreSQL, or a target's answer.
			fmt.Fprintf(out, "   - %s\n", termtext.Escape(m))
		}
		advice := inconclusiveAdvice(h)
		if n := len(res.Coverage.Unexplained); n > 0 {
			rest := ""
			if len(res.Coverage.Missing()) > n {
				rest = "; for the rest, " + advice
			}
			advice = "the side effects' workers failed for a reason of their own (see \"side effects\" above): mend what they hit, then run again" + rest
		}
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("seed %d; %s", h.Seed, advice))
		return
	}
	show := func(label string, v *chaos.Violation) {
		// A violation quotes what it saw (a target's ids, a history's
		// labels): their newlines are not bank-sim's.
		fmt.Fprintf(out, "\n%s %s %s\n", p.bad.Sprint(label+":"), p.bold.Sprint(v.Kind), termtext.Escape(v.Detail))
		for _, line := range chaos.Timeline(h, v.Intent) {
			fmt.Fprintf(out, "   %s\n", termtext.Escape(line))
		}
	}
	show("first violation", res.First)
	if res.Worst != res.First {
		show("worst violation", res.Worst)
	}
	fmt.Fprintf(out, "\n%s %d violation(s) · seed %d (repeat with %s)\n", p.bad.Sprint("INVALID"), len(res.Violations), h.Seed, chaosRepeat(h))
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

func checkTitle(kind string) string { return chaos.CheckTitle(kind) }

// targetCoverage is c as a target run can claim it: a target that does not
// promise byte-for-byte replays has its replays compared by status and
// transfer id only, so the repeats' path must not say "byte for byte".
func targetCoverage(h *chaos.History, c chaos.Coverage) chaos.Coverage {
	t := h.Config.Target
	if t == nil || t.Contract.ExactReplays {
		return c
	}
	paths := slices.Clone(c.Paths)
	for i, pc := range paths {
		if pc.Path == chaos.PathReplayAfterFinal {
			paths[i].What = "the same intent sent again after its final answer, replayed (the same status and transfer id)"
		}
	}
	c.Paths = paths
	return c
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
	// now is the clock of the interval; time.Now when nil (a test's fake
	// clock passes an interval without waiting it out).
	now func() time.Time
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
		now := time.Now
		if b.now != nil {
			now = b.now
		}
		t := now()
		if t.Sub(b.shown) < b.every && (total <= 0 || done < total) {
			return
		}
		if b.shown.IsZero() {
			// The first line only after a first interval: a short run
			// prints none.
			b.shown = t
			return
		}
		b.shown = t
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
		fmt.Fprintf(termtext.Raw(b.out), "\r  %d %s", done, b.noun)
		return
	}
	pct := done * 100 / total
	if pct == b.last && b.drawn {
		return
	}
	b.last, b.drawn = pct, true
	filled := done * width / total
	fmt.Fprintf(termtext.Raw(b.out), "\r  [%s%s] %3d%% %d/%d %s", strings.Repeat("█", filled), strings.Repeat("·", width-filled), pct, done, total, b.noun)
}

func (b *progressBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintf(termtext.Raw(b.out), "\r%s\r", strings.Repeat(" ", 60))
		b.drawn = false
	}
}

// inconclusiveAdvice says what may reach the defences a run never
// exercised. Against a target, a defence can also be missing for good: a
// server that answers neither way the contract allows never shows it,
// however long the run.
func inconclusiveAdvice(h *chaos.History) string {
	if h.Config.Target != nil {
		return "each line says what reaches it: raise --intents, or that fault's rate in --faults; a path the target never takes in a long run may be a defence it lacks (try bank-sim probe on it)"
	}
	return "each line says what reaches it: raise --intents, or that fault's rate in --faults (the default faults reach every defence)"
}

// lastLines are the last n non-empty lines of s: a command's output, its
// end being what says how it went.
func lastLines(s string, n int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l = strings.TrimRight(l, "\r "); l != "" {
			out = append(out, l)
		}
	}
	return out[max(0, len(out)-n):]
}
