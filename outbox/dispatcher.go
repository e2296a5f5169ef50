package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// Defaults of a Dispatcher.
const (
	// DefaultLease is how long a claim holds its rows; the article's minute
	// is "illustrative", bank-sim uses the key store's 30 s.
	DefaultLease       = 30 * time.Second
	DefaultBatch       = 10
	DefaultMaxAttempts = 5
	// DefaultBackoff is the wait after a row's first failed send; it
	// doubles with each further failure, up to maxBackoff.
	DefaultBackoff = time.Second
	maxBackoff     = 5 * time.Minute
)

// Outcome is what became of one row's delivery.
type Outcome string

// Outcomes of Deliver.
const (
	// Sent: the provider or the log accepted it, and the row is done.
	Sent Outcome = "sent"
	// AlreadySent: the provider had accepted this row's key before (an
	// earlier attempt sent it and did not live to mark it); no new SMS.
	AlreadySent Outcome = "already sent"
	// LostClaim: the row is no longer this dispatcher's (its lease expired
	// and another took it over, or it is done); nothing was sent.
	LostClaim Outcome = "lost claim"
	// Retry: the send failed; the row waits out its backoff.
	Retry Outcome = "will retry"
	// GaveUp: the send failed for the last allowed time; the row is failed
	// and needs a person.
	GaveUp Outcome = "gave up"
	// Stale: sent, but the row was no longer this dispatcher's when it came
	// to mark it: another dispatcher's claim stands.
	Stale Outcome = "sent, not marked: lost the claim"
	// Released: the dispatcher stopped (or failed) before it settled the
	// row and gave its claim back, so that the next claim takes the row at
	// once instead of waiting out the lease. It may have been sent: the
	// next send is then recognised by the provider's key.
	Released Outcome = "released: the dispatcher stopped"
)

// releaseTimeout bounds giving a claim back on the way out: the context
// the dispatcher ran on has ended by then.
const releaseTimeout = 5 * time.Second

// DispatchHooks are points where a scenario or a test can stop a dispatcher.
type DispatchHooks struct {
	// Claimed runs inside the claim's transaction after its statement and
	// before COMMIT, while the claimed rows are still locked.
	Claimed func(ctx context.Context, rows []Row)
	// BeforeSend runs after the dispatcher has checked that it still holds
	// the row, just before it sends.
	BeforeSend func(ctx context.Context, r Row)
	// AfterSend runs after the provider or the log accepted the row, before
	// it is marked done: a dispatcher that dies here has sent and not marked.
	AfterSend func(ctx context.Context, r Row)
}

// Dispatcher drains the outbox: it claims a batch of rows with FOR UPDATE
// SKIP LOCKED and a lease, sends each, and marks it done only if it still
// holds the claim token. A failed send is retried later, with backoff, a
// bounded number of times; every claim is recorded in outbox_attempts. A
// lease that expires (the dispatcher died or stalled) lets another take the
// rows over. Several dispatchers may run at once, in one process or many.
// Leases and backoff run on the database's clock, bank_now().
type Dispatcher struct {
	DB bank.DB
	// Name identifies the dispatcher in outbox_attempts and in the story.
	Name string
	// SMS receives the sms rows; Log the event rows.
	SMS *Provider
	Log *Log

	Batch       int           // rows per claim; DefaultBatch when zero
	Lease       time.Duration // DefaultLease when zero
	MaxAttempts int           // failed sends before a row is failed; DefaultMaxAttempts when zero
	Backoff     time.Duration // DefaultBackoff when zero
	// NewToken makes claim tokens; random when nil. Scenarios seed it.
	NewToken func() string
	Flaws    Flaws
	Hooks    DispatchHooks
	// Note, when set, is told about each row's outcome.
	Note func(format string, args ...any)

	// last makes a claim wait for rows that another transaction has
	// locked instead of skipping them: Final's, see there.
	last bool
}

// Batch is one claim: its token and the rows it holds.
type Batch struct {
	Token string
	Rows  []Row
}

// Report counts what a run of the dispatcher did.
type Report struct {
	Claimed  int
	Outcomes map[Outcome]int
}

func (r *Report) add(o Report) {
	r.Claimed += o.Claimed
	for k, v := range o.Outcomes {
		if r.Outcomes == nil {
			r.Outcomes = map[Outcome]int{}
		}
		r.Outcomes[k] += v
	}
}

func (d *Dispatcher) note(format string, args ...any) {
	if d.Note != nil {
		d.Note(format, args...)
	}
}

func (d *Dispatcher) batch() int {
	if d.Batch > 0 {
		return d.Batch
	}
	return DefaultBatch
}

func (d *Dispatcher) lease() time.Duration {
	if d.Lease > 0 {
		return d.Lease
	}
	return DefaultLease
}

func (d *Dispatcher) token() string {
	if d.NewToken != nil {
		return d.NewToken()
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ProviderKey is the provider's idempotency key for an sms row: its id, as
// the lesson says.
func ProviderKey(rowID int64) string { return fmt.Sprintf("outbox-%d", rowID) }

// EventID is the event id of an event row: its id, as in the article.
func EventID(rowID int64) string { return fmt.Sprintf("evt-%d", rowID) }

// Claim takes up to Batch rows that are ready (not done, not failed, past
// their backoff) and unclaimed or whose lease has expired, in id order, in
// one short transaction: FOR UPDATE SKIP LOCKED makes a concurrent claim
// pass over the rows this one is taking instead of taking them too (or
// waiting for them). Each row gets the batch's token, a lease and one more
// attempt.
func (d *Dispatcher) Claim(ctx context.Context) (Batch, error) {
	b := Batch{Token: d.token()}
	err := pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, d.ClaimSQL(),
			d.batch(), b.Token, d.Name, d.lease())
		if err != nil {
			return err
		}
		b.Rows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
			var o Row
			err := r.Scan(&o.ID, &o.Kind, &o.TransferID, &o.UserID, &o.Topic, &o.Key, &o.Payload, &o.Attempts)
			return o, err
		})
		if err != nil {
			return err
		}
		if d.Hooks.Claimed != nil {
			d.Hooks.Claimed(ctx, b.Rows)
		}
		return nil
	})
	if err != nil {
		return Batch{}, fmt.Errorf("claim outbox rows: %w", err)
	}
	sortRows(b.Rows)
	return b, nil
}

// ClaimSQL is the statement Claim sends: $1 the batch size, $2 the token,
// $3 the dispatcher's name, $4 the lease.
func (d *Dispatcher) ClaimSQL() string {
	lock := "FOR UPDATE SKIP LOCKED"
	if d.last {
		lock = "FOR UPDATE"
	}
	if d.Flaws.NoSkipLocked {
		lock = "" // the mistake: a concurrent claim reads the same rows as unclaimed and takes them too
	}
	lease := "AND (claimed_until IS NULL OR claimed_until < bank_now())"
	if d.Flaws.NoLeaseCheck {
		lease = "" // the mistake: once the claim has committed, nothing keeps the next poll off its rows
	}
	return `
			WITH candidates AS (
				SELECT id FROM outbox
				WHERE done_at IS NULL AND failed_at IS NULL AND next_attempt_at <= bank_now()
				  ` + lease + `
				ORDER BY id
				LIMIT $1
				` + lock + `
			), claimed AS (
				UPDATE outbox o
				SET claim_token = $2, claimed_by = $3, claimed_until = bank_now() + $4::interval, attempts = o.attempts + 1
				FROM candidates WHERE o.id = candidates.id
				RETURNING o.id, o.kind, o.transfer_id, o.user_id, o.topic, o.msg_key, o.payload, o.attempts
			), recorded AS (
				INSERT INTO outbox_attempts (outbox_id, attempt, dispatcher, claim_token, claimed_at, lease_until)
				SELECT id, attempts, $3, $2, bank_now(), bank_now() + $4::interval FROM claimed
			)
			SELECT id, kind, transfer_id, user_id, topic, msg_key, payload, attempts FROM claimed`
}

// sortRows puts a batch in id order: UPDATE … RETURNING promises none.
func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
}

// fence is the claim-token check of every write a dispatcher makes to a row
// it claimed: $2 is its token. Another dispatcher that took the row over
// after the lease expired has put its own token there.
func (d *Dispatcher) fence() string {
	if d.Flaws.NoClaimToken {
		return "$2::text IS NOT NULL" // the mistake: any dispatcher that ever claimed the row may write it
	}
	return "claim_token = $2"
}

// Deliver sends one claimed row and settles it. First it checks that the
// row is still its own and renews the lease for the send: a dispatcher that
// stalled past its lease finds the row taken over and sends nothing. Then it
// sends (an sms row with its id as the provider's idempotency key), and marks
// the row done only if it still holds the claim token.
func (d *Dispatcher) Deliver(ctx context.Context, token string, r Row) (Outcome, error) {
	// The attempt's lease_until moves with the row's, so the checker sees
	// how long this claim really lasted.
	var renewed int
	err := d.DB.QueryRow(ctx, `
		WITH renewed AS (
			UPDATE outbox SET claimed_until = bank_now() + $3::interval
			WHERE id = $1 AND done_at IS NULL AND failed_at IS NULL AND `+d.fence()+`
			RETURNING id, claimed_until
		), attempt AS (
			UPDATE outbox_attempts a SET lease_until = renewed.claimed_until
			FROM renewed WHERE a.outbox_id = renewed.id AND a.claim_token = $2
		)
		SELECT count(*) FROM renewed`,
		r.ID, token, d.lease()).Scan(&renewed)
	if err != nil {
		return "", fmt.Errorf("renew the claim of outbox row %d: %w", r.ID, err)
	}
	if renewed == 0 {
		d.note("%s: outbox row %d is no longer its own; it sends nothing", d.Name, r.ID)
		return LostClaim, d.record(ctx, token, r, LostClaim)
	}
	if d.Hooks.BeforeSend != nil {
		d.Hooks.BeforeSend(ctx, r)
	}
	replayed, sendErr := d.send(ctx, r)
	if sendErr != nil {
		return d.fail(ctx, token, r, sendErr)
	}
	if d.Hooks.AfterSend != nil {
		d.Hooks.AfterSend(ctx, r)
	}
	outcome := Sent
	if replayed {
		outcome = AlreadySent
	}
	// One statement: the mark and the attempt's outcome commit together.
	var marked int
	err = d.DB.QueryRow(ctx, `
		WITH marked AS (
			UPDATE outbox SET done_at = bank_now(), claim_token = NULL, claimed_until = NULL, last_error = NULL
			WHERE id = $1 AND done_at IS NULL AND `+d.fence()+`
			RETURNING id
		), settled AS (
			UPDATE outbox_attempts
			SET outcome = CASE WHEN EXISTS (SELECT 1 FROM marked) THEN $3 ELSE $4 END,
			    settled_seq = nextval('outbox_attempts_seq_seq')
			WHERE outbox_id = $1 AND claim_token = $2 AND settled_seq IS NULL
		)
		SELECT count(*) FROM marked`, r.ID, token, string(outcome), string(Stale)).Scan(&marked)
	if err != nil {
		return "", fmt.Errorf("mark outbox row %d done: %w", r.ID, err)
	}
	if marked == 0 {
		outcome = Stale
	}
	d.note("%s: outbox row %d (%s for transfer %d): %s", d.Name, r.ID, r.Kind, r.TransferID, outcome)
	return outcome, nil
}

// send hands the row to the provider or the log. It reports whether the
// provider had already accepted the row's key.
func (d *Dispatcher) send(ctx context.Context, r Row) (replayed bool, err error) {
	switch r.Kind {
	case KindSMS:
		if d.SMS == nil {
			return false, errors.New("no SMS provider")
		}
		m := Message{Key: ProviderKey(r.ID), UserID: r.UserID, Text: r.Payload, TransferID: r.TransferID}
		if d.Flaws.NoProviderKey {
			m.Key = "" // the mistake: a resend after a crash is a new message to the provider
		}
		sent, err := d.SMS.Send(ctx, m)
		return sent.Replayed, err
	case KindEvent:
		if d.Log == nil {
			return false, errors.New("no message log")
		}
		_, err := d.Log.Publish(ctx, r.Topic, r.Key, EventID(r.ID), r.TransferID, []byte(r.Payload))
		return false, err
	}
	return false, fmt.Errorf("outbox row %d has unknown kind %q", r.ID, r.Kind)
}

// fail gives the row back after a failed send: it waits out a backoff that
// doubles with each failure, or is failed for good after MaxAttempts failed
// sends. Claims that ended in a crash or a takeover do not count: nothing
// says the row is at fault.
func (d *Dispatcher) fail(ctx context.Context, token string, r Row, sendErr error) (Outcome, error) {
	max := d.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	backoff := d.Backoff
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	giveUp := "failures + 1 >= $5"
	if d.Flaws.GiveUpOnSameError {
		giveUp += " OR last_error = $3" // the mistake: a transient error that repeats is taken for a permanent one
	}
	outcome := Retry
	err := pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		var gaveUp bool
		err := tx.QueryRow(ctx, `
			UPDATE outbox
			SET claim_token = NULL, claimed_until = NULL, last_error = $3, failures = failures + 1,
			    next_attempt_at = bank_now() + least($4::interval * power(2, failures), $6::interval),
			    failed_at = CASE WHEN `+giveUp+` THEN bank_now() END
			WHERE id = $1 AND done_at IS NULL AND `+d.fence()+`
			RETURNING failed_at IS NOT NULL`, r.ID, token, sendErr.Error(), backoff, max, maxBackoff).Scan(&gaveUp)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			outcome = LostClaim
		case err != nil:
			return err
		case gaveUp:
			outcome = GaveUp
		}
		return recordTx(ctx, tx, token, r, outcome)
	})
	if err != nil {
		return "", fmt.Errorf("give outbox row %d back: %w", r.ID, err)
	}
	d.note("%s: outbox row %d (%s for transfer %d): %v; %s", d.Name, r.ID, r.Kind, r.TransferID, sendErr, outcome)
	return outcome, nil
}

func (d *Dispatcher) record(ctx context.Context, token string, r Row, o Outcome) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error { return recordTx(ctx, tx, token, r, o) })
}

// recordTx settles the attempt that token made on r.
func recordTx(ctx context.Context, tx pgx.Tx, token string, r Row, o Outcome) error {
	_, err := tx.Exec(ctx, `
		UPDATE outbox_attempts SET outcome = $3, settled_seq = nextval('outbox_attempts_seq_seq')
		WHERE outbox_id = $1 AND claim_token = $2 AND settled_seq IS NULL`, r.ID, token, string(o))
	if err != nil {
		return fmt.Errorf("record the attempt on outbox row %d: %w", r.ID, err)
	}
	return nil
}

// RunOnce claims one batch and delivers every row of it. If ctx ends (the
// dispatcher is stopped) or a delivery fails before the batch is settled,
// it gives back the rows it has not settled (Release) before it returns:
// a stopped dispatcher that kept its claim would hide those rows from
// every other claim, a last drain at a stop included, for a whole lease.
// A dispatcher that dies (a crash: runtime.Goexit in a hook) gives back
// nothing, as a process that dies cannot.
func (d *Dispatcher) RunOnce(ctx context.Context) (Report, error) {
	b, err := d.Claim(ctx)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Claimed: len(b.Rows), Outcomes: map[Outcome]int{}}
	for _, r := range b.Rows {
		o, err := Outcome(""), ctx.Err()
		if err == nil {
			o, err = d.Deliver(ctx, b.Token, r)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			n, rerr := d.Release(rctx, b.Token)
			cancel()
			if n > 0 {
				rep.Outcomes[Released] += n
			}
			return rep, errors.Join(err, rerr)
		}
		rep.Outcomes[o]++
	}
	return rep, nil
}

// Release gives back the rows of the claim token that are not settled: no
// token, no lease, their attempts settled as Released. Only the claim's own
// dispatcher may call it, once it has stopped working on them. It returns
// how many rows it gave back.
func (d *Dispatcher) Release(ctx context.Context, token string) (int, error) {
	var n int
	err := d.DB.QueryRow(ctx, `
		WITH released AS (
			UPDATE outbox SET claim_token = NULL, claimed_until = NULL
			WHERE claim_token = $1 AND done_at IS NULL
			RETURNING id
		), settled AS (
			UPDATE outbox_attempts SET outcome = $2, settled_seq = nextval('outbox_attempts_seq_seq')
			WHERE claim_token = $1 AND settled_seq IS NULL AND outbox_id IN (SELECT id FROM released)
		)
		SELECT count(*) FROM released`, token, string(Released)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("give back the outbox rows of claim %s: %w", token, err)
	}
	if n > 0 {
		d.note("%s: stopped with %d outbox rows claimed and not settled; gave them back", d.Name, n)
	}
	return n, nil
}

// Final is the last drain of a process whose dispatchers have all stopped,
// as serve's at its stop. First it takes back every claim still standing,
// whatever its lease says (its dispatcher stopped without giving it back:
// the database was away, or it crashed), settling those attempts as
// Released, and makes every row waiting out a backoff due; then it drains.
// A row left unsent after Final is one that could not be sent, not one that
// a dispatcher that will never come back was holding. Called while another
// dispatcher runs, it would take rows from under it.
func (d *Dispatcher) Final(ctx context.Context) (Report, error) {
	var n int
	err := d.DB.QueryRow(ctx, `
		WITH released AS (
			UPDATE outbox SET claim_token = NULL, claimed_until = NULL, next_attempt_at = least(next_attempt_at, bank_now())
			WHERE done_at IS NULL AND failed_at IS NULL
			  AND (claim_token IS NOT NULL OR claimed_until IS NOT NULL OR next_attempt_at > bank_now())
			RETURNING id
		), settled AS (
			UPDATE outbox_attempts SET outcome = $1, settled_seq = nextval('outbox_attempts_seq_seq')
			WHERE settled_seq IS NULL AND outbox_id IN (SELECT id FROM released)
		)
		SELECT count(*) FROM released`, string(Released)).Scan(&n)
	if err != nil {
		return Report{}, fmt.Errorf("take back the outbox's claims for the last drain: %w", err)
	}
	// Its claims wait for a row another transaction has locked, where a
	// running dispatcher's skip it: every dispatcher has stopped, so the
	// holder is one whose claim was cut off by its stop, and whose backend
	// still holds the row's lock until it sees its connection closed. At
	// load 8, 3 stops in 30 skipped the one row such a claim held: its SMS
	// was named unsent and dropped with the bank.
	last := *d
	last.last = true
	rep, err := last.Drain(ctx)
	if n > 0 {
		if rep.Outcomes == nil {
			rep.Outcomes = map[Outcome]int{}
		}
		rep.Outcomes[Released] += n
	}
	return rep, err
}

// Unsent lists the outbox rows that are not done (failed ones too), in id
// order: what a stop that drained the outbox for the last time could not
// send, to be named rather than dropped in silence.
func Unsent(ctx context.Context, q bank.Querier) ([]Row, error) {
	rows, err := q.Query(ctx, `
		SELECT id, kind, transfer_id, user_id, topic, msg_key, payload, attempts
		FROM outbox WHERE done_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read the unsent outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var o Row
		err := r.Scan(&o.ID, &o.Kind, &o.TransferID, &o.UserID, &o.Topic, &o.Key, &o.Payload, &o.Attempts)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the unsent outbox rows: %w", err)
	}
	return out, nil
}

// Drain runs batches until a claim finds no row ready.
func (d *Dispatcher) Drain(ctx context.Context) (Report, error) {
	var total Report
	for {
		rep, err := d.RunOnce(ctx)
		total.add(rep)
		if err != nil || rep.Claimed == 0 {
			return total, err
		}
	}
}

// Run drains the outbox every interval until ctx ends, telling onErr (when
// set) about each failed drain and carrying on: a database that is away for
// a moment delays the rows, it does not lose them.
func (d *Dispatcher) Run(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := d.Drain(ctx); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
