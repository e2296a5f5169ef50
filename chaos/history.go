// Package chaos runs many concurrent clients against the transfer handler
// under seeded random faults, records every operation in a History, and
// checks the history against the bank's invariants.
//
// Every intent and every fault decision is a pure function of (seed,
// intent, attempt), never of goroutine scheduling: a seed repeats the
// workload and the faults. In a free run (the default) it does not repeat
// the interleaving of the clients, which Go's scheduler and PostgreSQL's
// timing decide, so a race that broke a rule once may not come back. A
// deterministic run (Config.Deterministic) runs every goroutine as a task of
// a seeded scheduler that lets one task go at a time, with the real
// PostgreSQL in the loop (sched.go, scheddb.go): the same seed and config
// give the same history, byte for byte.
//
// A failing deterministic run shrinks (Shrink, delta debugging) to a small
// Script and Interleaving that break the same rule: a Recipe, which a person
// reads in a minute, saves as JSON, and replays as a scenario story
// (Recipe.Scenario). Campaign runs many seeds, for nightly CI.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/internal/userfile"
	"github.com/banksim/bank-sim/outbox"
)

// What a client saw for one attempt.
const (
	SeenOK       = "ok"       // 2xx: the transfer happened
	SeenRejected = "rejected" // a final refusal: it did not happen
	SeenUnknown  = "unknown"  // no answer, 409, 5xx: the client cannot know
)

// Phases of a run.
const (
	PhaseFault = "fault" // faults on, clients retry a few times
	PhaseHeal  = "heal"  // faults off, unknown intents retried until final
	// PhaseRepeat is the intent sent once more, with its key, after its final
	// answer: a user tapping again. It must be replayed byte for byte.
	PhaseRepeat = "repeat"
	// PhaseAfterCleanup is the same after the key cleanup job ran: the key is
	// younger than the retention, so it must still be replayed.
	PhaseAfterCleanup = "after-cleanup"
	// PhaseAfterFunds is an intent refused for want of money sent again,
	// with its key, after money arrived (a target run's): the refusal is
	// the key's answer and must be replayed, not turned into a transfer.
	PhaseAfterFunds = "after-funds"
	// PhaseAfterRestart is an intent sent again with its key after the
	// target restarted (--restart): it must be replayed.
	PhaseAfterRestart = "after-restart"
	// PhaseKeyless is a target run's request sent without the key, before
	// the intent's first attempt (Intent.Keyless): it must be refused.
	PhaseKeyless = "keyless"
)

// History is everything a run did and saw: the input of the checker.
type History struct {
	Seed    uint64         `json:"seed"`
	Config  Config         `json:"config"`
	Opening []bank.Account `json:"opening"`
	Intents []Intent       `json:"intents"`
	// Audits are the auditor's snapshots taken while clients ran.
	Audits []Snapshot `json:"audits"`
	// Final is the ledger after healing.
	Final bank.Ledger `json:"final"`
	// StuckKeys are the keys still in progress at the end, as user/key:
	// the key-lost or unresolved violation of the intent that sent one
	// names it, and one no such violation names is unresolved itself.
	StuckKeys []string `json:"stuckKeys"`
	// CompletedKeys are the keys completed in PostgreSQL at the end, as
	// user/key.
	CompletedKeys []string `json:"completedKeys"`
	// Fired counts the faults that fired, by name.
	Fired map[string]int `json:"fired"`
	// Server counts the defence paths taken inside the servers, where no
	// client can see them (takeover, fencing-rollback, deadlock-retry, …;
	// see Paths).
	Server   map[string]int `json:"server"`
	Duration time.Duration  `json:"durationNs"`
	// Freezes are the freezes of a sender's account that committed while
	// its transfer stood between its checks and its debit (FaultFreeze): a
	// transfer that held its row lock makes every freeze wait instead.
	Freezes []Freeze `json:"freezes,omitempty"`
	// BeforeHeal is the key store as the fault phase left it: read once
	// every request had returned, and before healing moved the clock past
	// every lock (which would let a retry take an abandoned key over, and
	// hide it).
	BeforeHeal *KeyCensus `json:"beforeHeal,omitempty"`
	// Cleanup is the run of the key cleanup job, after healing.
	Cleanup *CleanupRun `json:"cleanup,omitempty"`
	// Stalls are the staged races whose other side never came within its
	// bound (a retry that could not take the key over, a transaction that
	// never queued for the row): the race did not happen as planned, and the
	// run waited for nothing.
	Stalls []string `json:"stalls,omitempty"`
	// Crashes are the times PostgreSQL was killed (KillPostgres).
	Crashes []Crash `json:"crashes,omitempty"`
	// Partitions are the cuts of the servers' links to PostgreSQL
	// (Options.Cuts: a run whose copies live in network namespaces).
	Partitions []CutRecord `json:"partitions,omitempty"`
	// PrimaryChanges are the changes of primary seen on a multi-host
	// --database-url during the run (ha.Watcher), whoever caused them.
	PrimaryChanges []PrimaryChange `json:"primaryChanges,omitempty"`
	// PrimaryWatched is the primary a run on a server bank-sim did not
	// start found first and then watched all run: with no PrimaryChanges,
	// the proof that none happened, not that none was looked for.
	PrimaryWatched *PrimaryWatch `json:"primaryWatched,omitempty"`
	// FailoverCommand is the team's own failover command, run at a
	// seeded intent (--failover-cmd).
	FailoverCommand *FailoverCommand `json:"failoverCommand,omitempty"`
	// PastPlan, when set, is how far the workload went on past its plan
	// (Options.KeepGoing): a drill's, until the new primary acknowledged
	// a transfer sent after the failover.
	PastPlan *PastPlan `json:"pastPlan,omitempty"`
	// Deterministic is set for a run of the deterministic scheduler: its
	// offsets count steps, and Duration is zero.
	Deterministic *Determinism `json:"deterministic,omitempty"`
	// Wall is how long a deterministic run took in real time: not saved,
	// since it differs from run to run.
	Wall time.Duration `json:"-"`
	// SideEffects are what the transfers caused beyond the database, read
	// after healing: the SMS the provider accepted, the log's events, the
	// outbox left undone, the consumer's effects, the lock's grants.
	SideEffects *outbox.Snapshot `json:"sideEffects,omitempty"`
	// PipelineFaults are the side effects' fault decisions that fired, in
	// the order they were made, in a deterministic run: given back as
	// Config.PipelineFaults they fire again (a recipe's).
	PipelineFaults []outbox.Firing `json:"pipelineFaults,omitempty"`
	// WorkerErrors are the errors the side effects' workers hit in the
	// fault phase (nil for none): those no outage of the run explains
	// make it INCONCLUSIVE.
	WorkerErrors *WorkerErrors `json:"workerErrors,omitempty"`
	// Restarts are a target run's restarts of the target (--restart).
	Restarts []TargetRestart `json:"restarts,omitempty"`
}

// Freeze is an account frozen under a transfer that had checked it active.
type Freeze struct {
	Intent  string `json:"intent"`
	Account int64  `json:"account"`
	// AtNs is when the freeze was about to commit.
	AtNs int64 `json:"atNs"`
	// ThawNs is when the account was made active again, once the attempt
	// was over (0 in a history from before it was recorded: the end).
	ThawNs int64 `json:"thawNs,omitempty"`
}

// KeyCensus is the keys in progress at one moment, and the holders alive.
type KeyCensus struct {
	InProgress []HeldKey `json:"inProgress"`
	// LiveLocks are the locks of the holders still working (or stopped, but
	// alive): the servers stopped after their claim by crash-after-claim.
	LiveLocks []string `json:"liveLocks"`
}

// HeldKey is a key in progress and the lock on it.
type HeldKey struct {
	Key    string `json:"key"` // user/key
	LockID string `json:"lockId"`
}

// CleanupRun is one run of the 24 h key cleanup job.
type CleanupRun struct {
	AtNs int64 `json:"atNs"`
	// Clock is the simulated time it ran at: the run's oldest key was then
	// a minute short of the retention period, so nothing may go.
	Clock time.Time `json:"clock"`
	// Deleted are the keys it deleted.
	Deleted []string `json:"deleted"`
}

// Crash is one kill -9 of PostgreSQL and its restart on the same data.
type Crash struct {
	// AfterIntent is the intent whose start triggered it; -1 for a timer.
	AfterIntent int `json:"afterIntent"`
	// AtNs is when the kill was asked for, UpNs when the restarted server
	// accepted connections again.
	AtNs  int64  `json:"atNs"`
	UpNs  int64  `json:"upNs"`
	Error string `json:"error,omitempty"`
	// Failover, in a run through a failover (Config.Failover), is what the
	// crash was: the primary's death and the standby's promotion.
	Failover *FailoverRecord `json:"failover,omitempty"`
}

// FailoverRecord is one failover of a run on a primary and a standby: the
// standby stops receiving (so that it certainly lacks the last commits),
// the primary is killed with SIGKILL, the standby is promoted, and the
// app's pool reconnects through the multi-host URL. Offsets are the
// history's, like Crash.AtNs.
type FailoverRecord struct {
	// Replication is Config.Failover: async or sync.
	Replication string `json:"replication"`
	// StalledNs is when the standby stopped receiving WAL; Commits how many
	// commits the primary then made that the standby does not have
	// (async: committed; sync: waiting for the standby) before the kill.
	StalledNs int64 `json:"stalledNs"`
	Commits   int   `json:"commits"`
	// Cut says the standby stopped receiving because its replication
	// link was cut (chaos --partition=standby: a network partition
	// between the primary and its standby), not because it was told to.
	Cut bool `json:"cut,omitempty"`
	// KilledNs is when the primary and its backends were gone,
	// PromotedNs when the standby accepted writes.
	KilledNs   int64 `json:"killedNs"`
	PromotedNs int64 `json:"promotedNs"`
	// PrimaryPort is the old primary's port; ServingPort the port a new
	// connection through the multi-host URL reached after the failover
	// (the promoted standby's), where pg_is_in_recovery() was false.
	PrimaryPort int `json:"primaryPort"`
	ServingPort int `json:"servingPort"`
}

// FailoverLine says what a crash that was a failover did, in the words the
// terminal and the HTML report share: the intent, the replication, what
// the standby lacked, the kill, the promotion, where the app's multi-host
// URL landed, and when writes worked again. Empty for a crash that was
// not a failover, or whose failover failed.
func (c Crash) FailoverLine() string {
	f := c.Failover
	if f == nil || c.Error != "" {
		return ""
	}
	stalled := "the standby stopped receiving"
	if f.Cut {
		stalled = "the primary was cut off from its standby (the replication link down)"
	}
	ms := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }
	return fmt.Sprintf("at intent %d (%s replication): %s at %s; the primary, after %d commits the standby lacks, killed at %s; "+
		"the standby promoted %s later; the app's multi-host URL reached 127.0.0.1:%d (was %d), writes again %s after the kill",
		c.AfterIntent, f.Replication, stalled, ms(f.StalledNs), f.Commits, ms(f.KilledNs),
		ms(f.PromotedNs-f.KilledNs), f.ServingPort, f.PrimaryPort, ms(c.UpNs-f.KilledNs))
}

// Intent is one thing a user decided to do, and everything that happened to
// it: each attempt and what the client saw.
type Intent struct {
	Index    int                  `json:"index"`
	Label    string               `json:"label"`
	UserID   int64                `json:"userId"`
	Key      string               `json:"key"`
	Request  bank.TransferRequest `json:"request"`
	Attempts []Attempt            `json:"attempts"`
	// Outcome is the last thing the client settled on: ok, rejected, or
	// unknown when even healing could not settle it.
	Outcome string `json:"outcome"`
	// Healed is set when the fault phase ended unknown and healing ran.
	Healed bool `json:"healed,omitempty"`
	// Reuse, when set, marks a buggy client's intent that sent the key of
	// intent ReuseOf, its previous one, with a request that differs in
	// Reuse (recipient, sender or amount).
	Reuse   string `json:"reuse,omitempty"`
	ReuseOf int    `json:"reuseOf,omitempty"`
	// Client is the client (1 to Config.Clients) that sent it in the fault
	// phase: the lane the HTML report's timeline draws it in. Healing and
	// the repeats after the cleanup job are sent by workers of their own,
	// on the same client's behalf. Zero in histories saved before it was
	// recorded.
	Client int `json:"client,omitempty"`
	// Overdraw and Funds are a target run's refusal for funds and the
	// transfer that then paid its payer (Planned.Overdraw).
	Overdraw bool `json:"overdraw,omitempty"`
	Funds    bool `json:"funds,omitempty"`
	// Keyless, in a target run, is the request its client sent without
	// the key before its first attempt (Planned.Keyless). It is kept apart
	// from Attempts: it is not the key's, and only the no-key rule judges
	// it (the money rules count the transfer it made, if any).
	Keyless *Attempt `json:"keyless,omitempty"`
}

// Requests are what the intent's client sent, in order: the request
// without its key (Keyless), if any, then the attempts. A timeline draws
// them all; the key's rules judge only Attempts.
func (in *Intent) Requests() []*Attempt {
	out := make([]*Attempt, 0, len(in.Attempts)+1)
	if in.Keyless != nil {
		out = append(out, in.Keyless)
	}
	for k := range in.Attempts {
		out = append(out, &in.Attempts[k])
	}
	return out
}

// Attempt is one delivery of an intent.
type Attempt struct {
	N        int    `json:"n"`
	Phase    string `json:"phase"`
	Fault    string `json:"fault,omitempty"`
	Key      string `json:"key"`
	Instance int    `json:"instance"`
	// StartNs and EndNs are offsets from the start of the run.
	StartNs  int64 `json:"startNs"`
	EndNs    int64 `json:"endNs"`
	Status   int   `json:"status,omitempty"`
	Replayed bool  `json:"replayed,omitempty"`
	// Body is the answer's body as the handler gave it, kept byte for byte
	// (a JSON string in the saved history, so that re-checking compares the
	// same bytes).
	Body Bytes `json:"body,omitempty"`
	// Wire, over HTTP, is the body as it arrived when it differs from Body
	// (problem details); replays are compared on it.
	Wire  Bytes  `json:"wire,omitempty"`
	Error string `json:"error,omitempty"`
	Seen  string `json:"seen"`
	// Lookup marks a GET /transfers?key= that asked for the key's stored
	// answer (HTTP runs, healing) rather than a delivery of the transfer.
	Lookup bool `json:"lookup,omitempty"`
	// Lost, in a target run, is the answer the target sent to an attempt
	// whose answer the proxy dropped (lose-response): evidence that a
	// later answer naming the same transfer is a replay.
	Lost *Lost `json:"lost,omitempty"`
	// Reordered, in a target run, marks an attempt whose body had its
	// members in another order than the first attempt's (Planned.Reorder).
	Reordered bool `json:"reordered,omitempty"`
}

// Response is what the client was told, as a bank.Response.
func (a Attempt) Response() bank.Response {
	return bank.Response{Status: a.Status, Body: json.RawMessage(a.Body), Replayed: a.Replayed}
}

// Bytes returns the answer's body as the client received it: what a replay
// must repeat exactly.
func (a Attempt) Bytes() []byte {
	if a.Wire != nil {
		return a.Wire
	}
	return a.Body
}

// Bytes is a body kept byte for byte. It is saved as a JSON string: a
// json.RawMessage would be re-encoded (compacted, escaped) on the way, and a
// replay that differs from its original only in spacing or key order must
// differ in the saved history too.
type Bytes []byte

// MarshalJSON implements json.Marshaler.
func (b Bytes) MarshalJSON() ([]byte, error) { return json.Marshal(string(b)) }

// UnmarshalJSON implements json.Unmarshaler. It also reads a body saved as
// a JSON value, as histories did before bodies were kept byte for byte: its
// bytes are then the value as it was saved.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] != '"' {
		*b = Bytes(append([]byte(nil), data...))
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	*b = Bytes(s)
	return nil
}

// Snapshot is one audit: every balance, read in one transaction.
type Snapshot struct {
	AtNs     int64   `json:"atNs"`
	Balances []int64 `json:"balances"` // in the order of History.Opening
}

// Save writes h as JSON to path.
func (h *History) Save(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// HistoryWhat is what a history is, for the messages about a file that is
// not one.
const HistoryWhat = "a history written by 'bank-sim chaos --history FILE'"

// Load reads a history saved by Save.
func Load(path string) (*History, error) { return LoadContext(context.Background(), path) }

// LoadContext reads a history saved by Save: a regular file of at most
// userfile.MaxSize (a *userfile.Error says why not), read and decoded
// until ctx ends.
func LoadContext(ctx context.Context, path string) (*History, error) {
	b, err := userfile.Read(ctx, path, userfile.MaxSize, HistoryWhat)
	if err != nil {
		return nil, err
	}
	// Decoding the largest history takes seconds; an interrupt must not
	// wait for it.
	type decoded struct {
		h   *History
		err error
	}
	done := make(chan decoded, 1)
	go func() {
		var h History
		err := json.Unmarshal(b, &h)
		done <- decoded{&h, err}
	}()
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case d := <-done:
		if d.err != nil {
			return nil, fmt.Errorf("%s is not a bank-sim history: %w", path, d.err)
		}
		return d.h, nil
	}
}

// Causes of a PrimaryChange.
const (
	// CauseCommand: the run's --failover-cmd ran before it.
	CauseCommand = "failover-cmd"
	// CauseExpected: the run was told to expect one (--expect-failover).
	CauseExpected = "expected"
	// CauseUnannounced: nobody told bank-sim; it saw it all the same.
	CauseUnannounced = "unannounced"
)

// PrimaryWatch is the server a run's watcher found taking writes as the
// run began, and how often it asked again.
type PrimaryWatch struct {
	Host     string `json:"host"`
	Timeline int    `json:"timeline"`
	EveryMs  int64  `json:"everyMs"`
}

// String says what was watched, for a report's line.
func (w PrimaryWatch) String() string {
	return fmt.Sprintf("%s on timeline %d, asked every %d ms", w.Host, w.Timeline, w.EveryMs)
}

// PrimaryChange is one change of the server that takes writes, as a
// watcher on the run's multi-host URL saw it: another host, or the same
// address on another timeline (a promotion behind a virtual IP). Offsets
// are the history's.
type PrimaryChange struct {
	Cause string `json:"cause"`
	// From and To are host:port; FromTimeline and ToTimeline the
	// servers' timelines, when the server would say (0 otherwise).
	From         string `json:"from"`
	To           string `json:"to"`
	FromTimeline int    `json:"fromTimeline,omitempty"`
	ToTimeline   int    `json:"toTimeline,omitempty"`
	// LastSeenNs is when the old primary last answered as primary, LostNs
	// when it first did not, SeenNs when the new one first answered,
	// read-write.
	LastSeenNs int64 `json:"lastSeenNs"`
	LostNs     int64 `json:"lostNs"`
	SeenNs     int64 `json:"seenNs"`
}

// FailoverCommand is a run of the team's failover command.
type FailoverCommand struct {
	Command     string `json:"command"`
	AfterIntent int    `json:"afterIntent"`
	StartNs     int64  `json:"startNs"`
	EndNs       int64  `json:"endNs"`
	// ExitCode is -1 when it did not exit by itself (Error says why: not
	// found, killed at its timeout).
	ExitCode int    `json:"exitCode"`
	Error    string `json:"error,omitempty"`
	// Output is its stdout and stderr together, the last 8 KiB.
	Output string `json:"output"`
}

// Line says what the command did, in one line.
func (f FailoverCommand) Line() string {
	ms := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }
	how := fmt.Sprintf("exit %d", f.ExitCode)
	if f.Error != "" {
		how = f.Error
	}
	when := fmt.Sprintf("as intent %d started, at %s", f.AfterIntent, ms(f.StartNs))
	if f.AfterIntent < 0 {
		when = fmt.Sprintf("at %s", ms(f.StartNs)) // a run of a duration, or one that ended first
	}
	return fmt.Sprintf("%q %s, for %s: %s", f.Command, when, ms(f.EndNs-f.StartNs), how)
}

// PastPlan is the workload sent past its plan (Options.KeepGoing).
type PastPlan struct {
	// Intents is how many intents were started past the plan; EndNs is
	// when it was done (an offset of the run), from its last start.
	Intents int   `json:"intents"`
	EndNs   int64 `json:"endNs"`
	LastNs  int64 `json:"lastNs"`
}

// Line says it in the words of the terminal.
func (p PastPlan) Line() string {
	return fmt.Sprintf("went on past its plan (done at %s) for %s, to %s: a drill waits for a transfer the new primary acknowledges",
		time.Duration(p.EndNs).Round(time.Millisecond), plural(p.Intents, "intent", "intents"), time.Duration(p.LastNs).Round(time.Millisecond))
}
