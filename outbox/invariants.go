package outbox

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// Invariant names of side effects.
const (
	InvOneSMS      = "every committed transfer has exactly one SMS"
	InvNoGhost     = "no SMS and no event for a transfer that does not exist"
	InvOutboxDone  = "every outbox row is done"
	InvEffectOnce  = "no consumer effect applied twice"
	InvNoEventLost = "no event lost"
	InvSentOnce    = "every outbox row sent to the provider once"
	InvOneClaim    = "no outbox row held by two dispatchers at once"
	InvOneHolder   = "the lock never had two holders at once"
)

// World is what Check reads besides the database: the systems a run used.
// A nil or empty field's invariants are not checked.
type World struct {
	// SMS: every committed transfer has exactly one SMS, none for a
	// transfer that does not exist.
	SMS *Provider
	// Log: every committed transfer has an event on TransfersTopic, none
	// for a transfer that does not exist (duplicates are allowed: delivery
	// is at least once).
	Log *Log
	// Consumer: the group whose effects are checked: each event applied
	// once, and none of the log's events left unapplied.
	Consumer string
	// Dispatchers: check how the dispatchers shared the outbox: each sms
	// row sent to the provider once, and no row held by two at once.
	Dispatchers bool
	// Leases: only the second of those (a run whose dispatchers crash
	// after sending must send some rows twice; the provider's key makes
	// them one SMS).
	Leases bool
	// Locks: the lock never had two holders at once.
	Locks *Locks
}

// Snapshot is everything the side effects' invariants are judged on, read
// at one moment: PostgreSQL's tables in one snapshot, and the in-process
// systems' own records. It is plain data, so that a chaos history can keep
// it and be checked again offline.
type Snapshot struct {
	// Which invariants apply (see World).
	SMSChecked  bool   `json:"smsChecked,omitempty"`
	LogChecked  bool   `json:"logChecked,omitempty"`
	Consumer    string `json:"consumer,omitempty"`
	Dispatchers bool   `json:"dispatchers,omitempty"`
	Leases      bool   `json:"leases,omitempty"`
	LockChecked bool   `json:"lockChecked,omitempty"`

	// Transfers are the committed transfers' ids.
	Transfers []int64 `json:"transfers"`
	// SMS are the messages the provider accepted; Calls every request it
	// received (when Dispatchers).
	SMS   []SMS  `json:"sms,omitempty"`
	Calls []Call `json:"calls,omitempty"`
	// Events are the records of the transfers topic, without their values.
	Events []Record `json:"events,omitempty"`
	// Pending are the outbox rows not done; Orphans the rows whose transfer
	// does not exist; Overlaps the claims made while another dispatcher's
	// claim of the row was still valid.
	Pending  []string `json:"pending,omitempty"`
	Orphans  []string `json:"orphans,omitempty"`
	Overlaps []string `json:"overlaps,omitempty"`
	// Applied counts the consumer's notifications per event id.
	Applied map[string]int `json:"applied,omitempty"`
	// Grants is how many times the lock was granted; DoubleHolders the
	// grants made while another was valid.
	Grants        int      `json:"grants,omitempty"`
	DoubleHolders []string `json:"doubleHolders,omitempty"`
}

// Check reads a Snapshot of db and w and checks it.
func Check(ctx context.Context, db bank.DB, w World) ([]bank.Check, error) {
	s, err := Read(ctx, db, w)
	if err != nil {
		return nil, err
	}
	return s.Check(), nil
}

// Read takes the Snapshot: the ledger, the outbox and the consumer's tables
// in one REPEATABLE READ transaction, then the in-process records.
func Read(ctx context.Context, db bank.DB, w World) (Snapshot, error) {
	s := Snapshot{SMSChecked: w.SMS != nil, LogChecked: w.Log != nil, Consumer: w.Consumer,
		Dispatchers: w.Dispatchers, Leases: w.Leases, LockChecked: w.Locks != nil}
	if err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return s.read(ctx, tx) }); err != nil {
		return Snapshot{}, fmt.Errorf("read the side effects: %w", err)
	}
	if w.SMS != nil {
		s.SMS = w.SMS.Messages()
		if w.Dispatchers {
			s.Calls = w.SMS.Calls()
		}
	}
	if w.Log != nil {
		for _, r := range w.Log.Records(TransfersTopic) {
			r.Value = nil
			s.Events = append(s.Events, r)
		}
	}
	if w.Locks != nil {
		s.Grants, s.DoubleHolders = len(w.Locks.Grants()), w.Locks.Overlaps()
	}
	return s, nil
}

// Check judges the snapshot: the invariants its World selected.
func (s Snapshot) Check() []bank.Check {
	var checks []bank.Check
	transfers := map[int64]bool{}
	for _, id := range s.Transfers {
		transfers[id] = true
	}
	if s.SMSChecked {
		checks = append(checks, s.oneSMS(transfers))
	}
	if s.SMSChecked || s.LogChecked {
		checks = append(checks, s.noGhost(transfers), s.outboxDone())
	}
	if s.Dispatchers {
		checks = append(checks, s.sentOnce(), s.oneClaim())
	} else if s.Leases {
		checks = append(checks, s.oneClaim())
	}
	if s.LogChecked {
		checks = append(checks, s.noEventLost())
	}
	if s.Consumer != "" {
		checks = append(checks, s.effectOnce())
	}
	if s.LockChecked {
		checks = append(checks, s.oneHolder())
	}
	return checks
}

func (s *Snapshot) read(ctx context.Context, tx pgx.Tx) error {
	var err error
	if s.Transfers, err = collect[int64](ctx, tx, "SELECT id::bigint FROM transfers ORDER BY id"); err != nil {
		return err
	}
	if s.Pending, err = collect[string](ctx, tx, `
		SELECT format('row %s (%s for transfer %s, %s attempts%s)', id, kind, transfer_id, attempts,
		              CASE WHEN failed_at IS NOT NULL THEN ', failed: ' || coalesce(last_error, '') ELSE '' END)
		FROM outbox WHERE done_at IS NULL ORDER BY id`); err != nil {
		return err
	}
	if s.Orphans, err = collect[string](ctx, tx, `
		SELECT format('outbox row %s is about transfer %s, which does not exist', o.id, o.transfer_id)
		FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = o.transfer_id)
		ORDER BY o.id`); err != nil {
		return err
	}
	// A claim made while an earlier claim of the same row, by another token,
	// was still valid and not yet settled: two dispatchers held the row.
	// Ordered to the last column: a claim can overlap several earlier ones,
	// and without a1.seq their order was the rows' order on disk, which
	// differs in a bank reset for reuse (banks.Recycled) from a clone.
	if s.Overlaps, err = collect[string](ctx, tx, `
		SELECT format('row %s: %s claimed it while %s still held it', a2.outbox_id, a2.dispatcher, a1.dispatcher)
		FROM outbox_attempts a1
		JOIN outbox_attempts a2 ON a2.outbox_id = a1.outbox_id AND a2.seq > a1.seq AND a2.claim_token <> a1.claim_token
		WHERE a2.claimed_at < a1.lease_until AND (a1.settled_seq IS NULL OR a1.settled_seq > a2.seq)
		ORDER BY a2.outbox_id, a2.seq, a1.seq`); err != nil {
		return err
	}
	if s.Consumer != "" {
		s.Applied = map[string]int{}
		rows, err := tx.Query(ctx, "SELECT event_id, count(*)::int FROM notifications WHERE consumer = $1 GROUP BY event_id", s.Consumer)
		if err != nil {
			return err
		}
		var id string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { s.Applied[id] = n; return nil }); err != nil {
			return err
		}
	}
	return nil
}

func collect[T any](ctx context.Context, tx pgx.Tx, sql string) ([]T, error) {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[T])
}

func (s Snapshot) oneSMS(transfers map[int64]bool) bank.Check {
	per := map[int64]int{}
	for _, m := range s.SMS {
		per[m.TransferID]++
	}
	var bad []string
	for _, id := range sortedIDs(transfers) {
		if n := per[id]; n != 1 {
			bad = append(bad, fmt.Sprintf("transfer %d has %d", id, n))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvOneSMS, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvOneSMS, OK: true, Detail: count(len(transfers), "transfer") + ", " + count(len(s.SMS), "SMS")}
}

func (s Snapshot) noGhost(transfers map[int64]bool) bank.Check {
	bad := append([]string(nil), s.Orphans...)
	for _, m := range s.SMS {
		if !transfers[m.TransferID] {
			bad = append(bad, fmt.Sprintf("SMS %d %q is about transfer %d, which does not exist", m.ID, m.Text, m.TransferID))
		}
	}
	for _, r := range s.Events {
		if !transfers[r.TransferID] {
			bad = append(bad, fmt.Sprintf("event %s is about transfer %d, which does not exist", r.ID, r.TransferID))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvNoGhost, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvNoGhost, OK: true, Detail: "every message is about a committed transfer"}
}

func (s Snapshot) outboxDone() bank.Check {
	if len(s.Pending) > 0 {
		return bank.Check{Name: InvOutboxDone, OK: false, Detail: "not done: " + strings.Join(s.Pending, "; ")}
	}
	return bank.Check{Name: InvOutboxDone, OK: true, Detail: "nothing left in the outbox"}
}

// sentOnce counts the provider's calls per transfer (one sms row per
// transfer): accepted, replayed or with a lost answer, each is a send. A
// call refused while the provider was down sent nothing.
func (s Snapshot) sentOnce() bank.Check {
	per := map[int64]int{}
	for _, c := range s.Calls {
		if c.Outcome != "down" {
			per[c.TransferID]++
		}
	}
	var bad []string
	for _, id := range s.Transfers {
		if n := per[id]; n > 1 {
			bad = append(bad, fmt.Sprintf("transfer %d's SMS was sent %d times", id, n))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvSentOnce, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvSentOnce, OK: true, Detail: count(len(s.Calls), "send") + " for " + count(len(s.Transfers), "transfer")}
}

func (s Snapshot) oneClaim() bank.Check {
	if len(s.Overlaps) > 0 {
		return bank.Check{Name: InvOneClaim, OK: false, Detail: strings.Join(s.Overlaps, "; ")}
	}
	return bank.Check{Name: InvOneClaim, OK: true, Detail: "every takeover came after a lease expired"}
}

// noEventLost: every committed transfer has its event in the log, and, when
// a consumer is checked, every event in the log has been applied by it.
func (s Snapshot) noEventLost() bank.Check {
	published := map[int64]bool{}
	var bad []string
	for _, r := range s.Events {
		published[r.TransferID] = true
		if s.Consumer != "" && s.Applied[r.ID] == 0 {
			bad = append(bad, fmt.Sprintf("event %s (offset %d) was never applied by %s", r.ID, r.Offset, s.Consumer))
		}
	}
	for _, id := range s.Transfers {
		if !published[id] {
			bad = append(bad, fmt.Sprintf("transfer %d has no event", id))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvNoEventLost, OK: false, Detail: strings.Join(dedupe(bad), "; ")}
	}
	return bank.Check{Name: InvNoEventLost, OK: true, Detail: count(len(s.Transfers), "transfer") + ", " + count(len(s.Events), "event")}
}

func (s Snapshot) effectOnce() bank.Check {
	var bad []string
	for id, n := range s.Applied {
		if n > 1 {
			bad = append(bad, fmt.Sprintf("event %s applied %d times", id, n))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return bank.Check{Name: InvEffectOnce, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvEffectOnce, OK: true, Detail: count(len(s.Applied), "event") + " applied once each"}
}

func (s Snapshot) oneHolder() bank.Check {
	if len(s.DoubleHolders) > 0 {
		return bank.Check{Name: InvOneHolder, OK: false, Detail: strings.Join(s.DoubleHolders, "; ")}
	}
	return bank.Check{Name: InvOneHolder, OK: true, Detail: count(s.Grants, "grant") + ", each after the one before had ended"}
}

func sortedIDs(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// count spells n things: "1 transfer", "2 transfers", "2 SMS".
func count(n int, noun string) string {
	if n == 1 || noun == "SMS" {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
