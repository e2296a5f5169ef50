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
	// row sent to the provider once, no row held by two at once.
	Dispatchers bool
	// Locks: the lock never had two holders at once.
	Locks *Locks
}

// Check reads the ledger, the outbox and the consumer's tables in one
// snapshot, and the in-process systems' own records, and checks the side
// effects' invariants.
func Check(ctx context.Context, db bank.DB, w World) ([]bank.Check, error) {
	var checks []bank.Check
	var s snapshot
	if err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return s.read(ctx, tx, w) }); err != nil {
		return nil, fmt.Errorf("read the side effects: %w", err)
	}
	if w.SMS != nil {
		checks = append(checks, s.oneSMS(w.SMS))
	}
	if w.SMS != nil || w.Log != nil {
		checks = append(checks, s.noGhost(w), s.outboxDone())
	}
	if w.Dispatchers {
		checks = append(checks, s.sentOnce(w.SMS), s.oneClaim())
	}
	if w.Log != nil {
		checks = append(checks, s.noEventLost(w))
	}
	if w.Consumer != "" {
		checks = append(checks, s.effectOnce())
	}
	if w.Locks != nil {
		checks = append(checks, oneHolder(w.Locks))
	}
	return checks, nil
}

type snapshot struct {
	transfers map[int64]bool
	pending   []string // outbox rows not done
	orphans   []string // outbox rows whose transfer does not exist
	overlaps  []string
	effects   map[string]int // event id → notifications
}

func (s *snapshot) read(ctx context.Context, tx pgx.Tx, w World) error {
	s.transfers = map[int64]bool{}
	ids, err := collect[int64](ctx, tx, "SELECT id FROM transfers")
	if err != nil {
		return err
	}
	for _, id := range ids {
		s.transfers[id] = true
	}
	if s.pending, err = collect[string](ctx, tx, `
		SELECT format('row %s (%s for transfer %s, %s attempts%s)', id, kind, transfer_id, attempts,
		              CASE WHEN failed_at IS NOT NULL THEN ', failed: ' || coalesce(last_error, '') ELSE '' END)
		FROM outbox WHERE done_at IS NULL ORDER BY id`); err != nil {
		return err
	}
	if s.orphans, err = collect[string](ctx, tx, `
		SELECT format('outbox row %s is about transfer %s, which does not exist', o.id, o.transfer_id)
		FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = o.transfer_id)
		ORDER BY o.id`); err != nil {
		return err
	}
	// A claim made while an earlier claim of the same row, by another token,
	// was still valid and not yet settled: two dispatchers held the row.
	if s.overlaps, err = collect[string](ctx, tx, `
		SELECT format('row %s: %s claimed it while %s still held it', a2.outbox_id, a2.dispatcher, a1.dispatcher)
		FROM outbox_attempts a1
		JOIN outbox_attempts a2 ON a2.outbox_id = a1.outbox_id AND a2.seq > a1.seq AND a2.claim_token <> a1.claim_token
		WHERE a2.claimed_at < a1.lease_until AND (a1.settled_seq IS NULL OR a1.settled_seq > a2.seq)
		ORDER BY a2.outbox_id, a2.seq`); err != nil {
		return err
	}
	s.effects = map[string]int{}
	if w.Consumer != "" {
		rows, err := tx.Query(ctx, "SELECT event_id, count(*) FROM notifications WHERE consumer = $1 GROUP BY event_id", w.Consumer)
		if err != nil {
			return err
		}
		var id string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { s.effects[id] = n; return nil }); err != nil {
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

func (s *snapshot) oneSMS(p *Provider) bank.Check {
	per := map[int64]int{}
	for _, m := range p.Messages() {
		per[m.TransferID]++
	}
	var bad []string
	for _, id := range sortedIDs(s.transfers) {
		if n := per[id]; n != 1 {
			bad = append(bad, fmt.Sprintf("transfer %d has %d", id, n))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvOneSMS, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvOneSMS, OK: true, Detail: count(len(s.transfers), "transfer") + ", " + count(len(p.Messages()), "SMS")}
}

func (s *snapshot) noGhost(w World) bank.Check {
	bad := append([]string(nil), s.orphans...)
	if w.SMS != nil {
		for _, m := range w.SMS.Messages() {
			if !s.transfers[m.TransferID] {
				bad = append(bad, fmt.Sprintf("SMS %d %q is about transfer %d, which does not exist", m.ID, m.Text, m.TransferID))
			}
		}
	}
	if w.Log != nil {
		for _, r := range w.Log.Records(TransfersTopic) {
			if !s.transfers[r.TransferID] {
				bad = append(bad, fmt.Sprintf("event %s is about transfer %d, which does not exist", r.ID, r.TransferID))
			}
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvNoGhost, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvNoGhost, OK: true, Detail: "every message is about a committed transfer"}
}

func (s *snapshot) outboxDone() bank.Check {
	if len(s.pending) > 0 {
		return bank.Check{Name: InvOutboxDone, OK: false, Detail: "not done: " + strings.Join(s.pending, "; ")}
	}
	return bank.Check{Name: InvOutboxDone, OK: true, Detail: "nothing left in the outbox"}
}

// sentOnce counts the provider's calls per transfer (one sms row per
// transfer): accepted, replayed or with a lost answer, each is a send. A
// call refused while the provider was down sent nothing.
func (s *snapshot) sentOnce(p *Provider) bank.Check {
	if p == nil {
		return bank.Check{Name: InvSentOnce, OK: true, Detail: "no SMS provider"}
	}
	per := map[int64]int{}
	for _, c := range p.Calls() {
		if c.Outcome != "down" {
			per[c.TransferID]++
		}
	}
	var bad []string
	for _, id := range sortedIDs(s.transfers) {
		if n := per[id]; n > 1 {
			bad = append(bad, fmt.Sprintf("transfer %d's SMS was sent %d times", id, n))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvSentOnce, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvSentOnce, OK: true, Detail: count(len(p.Calls()), "send") + " for " + count(len(s.transfers), "transfer")}
}

func (s *snapshot) oneClaim() bank.Check {
	if len(s.overlaps) > 0 {
		return bank.Check{Name: InvOneClaim, OK: false, Detail: strings.Join(s.overlaps, "; ")}
	}
	return bank.Check{Name: InvOneClaim, OK: true, Detail: "every takeover came after a lease expired"}
}

// noEventLost: every committed transfer has its event in the log, and, when
// a consumer is checked, every event in the log has been applied by it.
func (s *snapshot) noEventLost(w World) bank.Check {
	published := map[int64]bool{}
	var bad []string
	for _, r := range w.Log.Records(TransfersTopic) {
		published[r.TransferID] = true
		if w.Consumer != "" && s.effects[r.ID] == 0 {
			bad = append(bad, fmt.Sprintf("event %s (offset %d) was never applied by %s", r.ID, r.Offset, w.Consumer))
		}
	}
	for _, id := range sortedIDs(s.transfers) {
		if !published[id] {
			bad = append(bad, fmt.Sprintf("transfer %d has no event", id))
		}
	}
	if len(bad) > 0 {
		return bank.Check{Name: InvNoEventLost, OK: false, Detail: strings.Join(dedupe(bad), "; ")}
	}
	return bank.Check{Name: InvNoEventLost, OK: true, Detail: count(len(s.transfers), "transfer") + ", " + count(len(w.Log.Records(TransfersTopic)), "event")}
}

func (s *snapshot) effectOnce() bank.Check {
	var bad []string
	for id, n := range s.effects {
		if n > 1 {
			bad = append(bad, fmt.Sprintf("event %s applied %d times", id, n))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return bank.Check{Name: InvEffectOnce, OK: false, Detail: strings.Join(bad, "; ")}
	}
	return bank.Check{Name: InvEffectOnce, OK: true, Detail: count(len(s.effects), "event") + " applied once each"}
}

func oneHolder(l *Locks) bank.Check {
	if o := l.Overlaps(); len(o) > 0 {
		return bank.Check{Name: InvOneHolder, OK: false, Detail: strings.Join(o, "; ")}
	}
	return bank.Check{Name: InvOneHolder, OK: true, Detail: count(len(l.Grants()), "grant") + ", each after the one before had ended"}
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
