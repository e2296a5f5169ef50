// Package chaos runs many concurrent clients against the transfer handler
// under seeded random faults, records every operation in a History, and
// checks the history against the bank's invariants. A failing run is
// repeated from its seed: every intent and every fault decision is a pure
// function of (seed, intent, attempt), never of goroutine scheduling.
package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/banksim/bank-sim/bank"
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
	// StuckKeys are the keys still in progress after healing.
	StuckKeys []string `json:"stuckKeys"`
	// Fired counts the faults that fired, by name.
	Fired map[string]int `json:"fired"`
	// Takeovers and FencingRollbacks are counted on the server's side.
	Takeovers        int           `json:"takeovers"`
	FencingRollbacks int           `json:"fencingRollbacks"`
	Duration         time.Duration `json:"durationNs"`
	// Crashes are the times PostgreSQL was killed (KillPostgres).
	Crashes []Crash `json:"crashes,omitempty"`
	// CompletedKeys are the keys completed in PostgreSQL after healing,
	// as user/key; read only for a run with a crash.
	CompletedKeys []string `json:"completedKeys,omitempty"`
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
}

// Attempt is one delivery of an intent.
type Attempt struct {
	N        int    `json:"n"`
	Phase    string `json:"phase"`
	Fault    string `json:"fault,omitempty"`
	Key      string `json:"key"`
	Instance int    `json:"instance"`
	// StartNs and EndNs are offsets from the start of the run.
	StartNs  int64           `json:"startNs"`
	EndNs    int64           `json:"endNs"`
	Status   int             `json:"status,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
	Error    string          `json:"error,omitempty"`
	Seen     string          `json:"seen"`
	// Lookup marks a GET /transfers?key= that asked for the key's stored
	// answer (HTTP runs, healing) rather than a delivery of the transfer.
	Lookup bool `json:"lookup,omitempty"`
}

// Response is what the client was told, as a bank.Response.
func (a Attempt) Response() bank.Response {
	return bank.Response{Status: a.Status, Body: a.Body, Replayed: a.Replayed}
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

// Load reads a history saved by Save.
func Load(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s is not a bank-sim history: %w", path, err)
	}
	return &h, nil
}
