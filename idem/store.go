package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// DefaultLockTTL is how long a claim holds its key before a retry may take
// it over. It must outlive the slowest normal request.
const DefaultLockTTL = 30 * time.Second

// DefaultRetention is how long keys are kept: long enough to cover every
// realistic retry of an intent.
const DefaultRetention = 24 * time.Hour

// ErrLostLock is returned by Complete when the caller no longer holds the
// key: its lock expired and another request took the key over. The caller's
// transaction must roll back, transfer included.
var ErrLostLock = errors.New("lost the idempotency lock; rolling back")

// Action tells the handler what to do after Begin.
type Action int

const (
	// Proceed: the key is ours; do the work.
	Proceed Action = iota
	// Replay: the key is completed; answer with the stored response.
	Replay
	// Respond: answer with Claim.Response (422 key reused, 409 in progress).
	Respond
)

func (a Action) String() string {
	return [...]string{"proceed", "replay", "respond"}[a]
}

// Claim is the outcome of Begin.
type Claim struct {
	Action   Action
	LockID   string        // set when Action is Proceed
	TookOver bool          // Proceed after taking over an expired lock
	Response bank.Response // set when Action is Replay or Respond
}

// Flaws switches on the lesson's mistakes in the key store. The zero value
// is the correct store.
type Flaws struct {
	NoFingerprint bool // never compare request hashes
	Unscoped      bool // keys shared by all users instead of scoped per user
	NoExpiry      bool // a claim's lock never expires
	NoFencing     bool // Complete does not check that the caller still holds the lock
	// AppClock measures locks and key ages on each app server's own clock
	// instead of the database's: a server whose clock runs ahead takes over
	// a lock that is still valid, and one that runs behind writes keys that
	// the cleanup job thinks are old.
	AppClock bool
	// JSONBReplay stores the response as jsonb, as the lesson's table does:
	// jsonb reorders an object's members, so a replay is not the original
	// answer byte for byte.
	JSONBReplay bool
	// RebuiltRefusals replays a stored refusal rebuilt from its status and
	// code, with the endpoint's generic message, instead of the bytes that
	// were sent: the same refusal, but not the same answer.
	RebuiltRefusals bool
}

// Store is the idempotency-key store in PostgreSQL.
type Store struct {
	// LockTTL is how long a claim is valid; DefaultLockTTL when zero.
	LockTTL time.Duration
	// NewLockID makes fencing tokens; random when nil. Scenarios pass a seeded
	// generator so that runs repeat.
	NewLockID func() string
	Flaws     Flaws
}

func (s *Store) ttl() time.Duration {
	if s.Flaws.NoExpiry {
		return time.Duration(math.MaxInt64) // ~292 years: never, in practice
	}
	if s.LockTTL > 0 {
		return s.LockTTL
	}
	return DefaultLockTTL
}

func (s *Store) lockID() string {
	if s.NewLockID != nil {
		return s.NewLockID()
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Store) scope(userID int64) int64 {
	if s.Flaws.Unscoped {
		return 0
	}
	return userID
}

// clock is the time argument of every statement that measures a lock or a
// key's age. The SQL reads it as coalesce($n, bank_now()): NULL, which the
// correct store passes, means the database's clock, the one clock that every
// app server sharing the database agrees on.
func (s *Store) clock(now time.Time) any {
	if s.Flaws.AppClock {
		return now // the mistake: each app server's own clock
	}
	return nil
}

// The statements of the key store, named so that a tool that replays them
// elsewhere (bench --vs-pgbench runs them in pgbench) sends exactly what
// bank-sim sends.
const (
	// ClaimSQL claims a key, or reads it when it is taken, in one statement:
	// $1 the user's scope, $2 the key, $3 the request's fingerprint, $4 the
	// lock id, $5 the lock's TTL, $6 NULL for the database's clock (or an
	// app server's, the app-clock mistake). It returns one row: (true, NULL…)
	// when this request claimed the key, (false, the stored row) when the
	// key was there; or none, when a claim committed after this statement's
	// snapshot was taken (the INSERT found it, the read could not see it).
	//
	// The INSERT runs only when the read found nothing. A retry of a
	// completed key — the common case after a lost response — is then one
	// index read: INSERT … ON CONFLICT DO NOTHING that finds its key costs
	// more than the read itself (in pgbench, 4 clients, this statement ran
	// at about twice the rate of the claim and the read sent one after the
	// other, and at 80% of the bare read). ON CONFLICT still settles a race
	// between two new claims: exactly one inserts.
	ClaimSQL = `
			WITH stored AS (
				SELECT request_hash, status, response_status, response_body
				FROM idempotency_keys WHERE user_id = $1 AND key = $2
			), claimed AS (
				INSERT INTO idempotency_keys (user_id, key, request_hash, status, lock_id, locked_until, created_at)
				SELECT $1, $2, $3, 'in_progress', $4, t + $5::interval, t
				FROM (SELECT coalesce($6::timestamptz, bank_now()) AS t) AS clock
				WHERE NOT EXISTS (SELECT FROM stored)
				ON CONFLICT (user_id, key) DO NOTHING
				RETURNING true
			)
			SELECT true, NULL, NULL, NULL, NULL FROM claimed
			UNION ALL
			SELECT false, request_hash, status, response_status, response_body FROM stored`
)

// CompleteSQL is the UPDATE with which the correct store completes a key
// (Complete): $1 the scope, $2 the key, $3 the holder's lock id, $4 the
// status, $5 the body.
var CompleteSQL = (&Store{}).completeSQL("$5::text")

// Begin claims key for userID, or says why the caller must not proceed.
// The claim is one INSERT … ON CONFLICT DO NOTHING committed on its own, so
// of two requests racing for a key exactly one wins.
//
// now is the calling app server's own clock. The correct store does not use
// it: locks and key ages are measured on the database's clock (bank_now()),
// so servers whose clocks disagree cannot take over each other's valid locks.
// Only the AppClock mistake reads it.
func (s *Store) Begin(ctx context.Context, db bank.Querier, userID int64, key, hash string, now time.Time) (Claim, error) {
	scope, at, ttl := s.scope(userID), s.clock(now), s.ttl()
	// A key can vanish between the failed INSERT and the SELECT (its holder
	// released it after an error); then claiming again is right.
	for range 3 {
		lockID := s.lockID()
		if hook := hooksFrom(ctx).BeforeClaim; hook != nil {
			hook(ctx)
		}
		claimed, k, err := claim(ctx, db, scope, key, hash, lockID, ttl, at)
		if err == nil && claimed {
			if err = claimCommitted(ctx); err != nil {
				err = fmt.Errorf("claim key: %w", err)
			}
		}
		if err != nil {
			return Claim{}, err
		}
		if claimed {
			return Claim{Action: Proceed, LockID: lockID}, nil
		}
		if k == nil {
			continue
		}
		if k.hash != hash && !s.Flaws.NoFingerprint {
			return Claim{Action: Respond, Response: bank.Reject(422, CodeKeyReused,
				"This Idempotency-Key was sent with a different request; use a new key for a new transfer")}, nil
		}
		if k.status == "completed" && k.respStatus != nil && k.respBody != nil {
			resp := bank.Response{Status: int(*k.respStatus), Body: []byte(*k.respBody), Replayed: true}
			if s.Flaws.RebuiltRefusals && !resp.OK() {
				resp.Body = bank.Reject(resp.Status, resp.Code(), "This request was refused").Body
			}
			return Claim{Action: Replay, Response: resp}, nil
		}

		tag, err := db.Exec(ctx, `
			UPDATE idempotency_keys SET lock_id = $3, locked_until = clock.t + $4::interval
			FROM (SELECT coalesce($5::timestamptz, bank_now()) AS t) AS clock
			WHERE user_id = $1 AND key = $2 AND status = 'in_progress' AND locked_until < clock.t`,
			scope, key, lockID, ttl, at)
		if err != nil {
			return Claim{}, fmt.Errorf("take over key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return Claim{Action: Proceed, LockID: lockID, TookOver: true}, nil
		}
		return Claim{Action: Respond, Response: InProgress()}, nil
	}
	return Claim{}, fmt.Errorf("claim key %q: it kept changing under us", key)
}

// storedKey is a key's row as ClaimSQL reads it.
type storedKey struct {
	hash, status string
	respStatus   *int32
	respBody     *string
}

// claim sends ClaimSQL: one statement, one round trip, for a new key and for
// a replay alike. It commits on its own (an implicit transaction), before
// the transfer begins. k is nil when the key was not claimed and its row was
// not seen either: claimed by a request whose claim committed after this
// statement's snapshot, or released by its holder in between; claiming
// again then reads it, or claims it.
func claim(ctx context.Context, db bank.Querier, scope int64, key, hash, lockID string, ttl time.Duration, at any) (claimed bool, k *storedKey, err error) {
	var row storedKey
	var hashOrNil, statusOrNil *string
	err = db.QueryRow(ctx, ClaimSQL, scope, key, hash, lockID, ttl, at).
		Scan(&claimed, &hashOrNil, &statusOrNil, &row.respStatus, &row.respBody)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil, nil
	case err != nil:
		return false, nil, fmt.Errorf("claim key: %w", err)
	case claimed:
		return true, nil, nil
	case hashOrNil == nil || statusOrNil == nil:
		return false, nil, fmt.Errorf("claim key: the stored key has no fingerprint or status")
	}
	row.hash, row.status = *hashOrNil, *statusOrNil
	return false, &row, nil
}

// Complete stores resp as the key's final answer, inside the caller's
// transaction, so that the work and its stored response commit together. It
// returns ErrLostLock when lockID is no longer the key's lock: the fencing
// check that stops a slow server from committing after a retry took over.
// The body is stored as the bytes that were sent, so a replay is the
// original answer byte for byte.
func (s *Store) Complete(ctx context.Context, tx bank.Querier, userID int64, key, lockID string, resp bank.Response) error {
	tag, err := tx.Exec(ctx, s.completeSQL("$5::text"), s.scope(userID), key, lockID, resp.Status, string(resp.Body))
	if err != nil {
		return fmt.Errorf("complete key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLostLock
	}
	return nil
}

// completeSQL is the UPDATE that completes a key with the answer whose body
// is the text expression body: $1 to $4 are the scope, the key, the
// holder's lock id and the status.
func (s *Store) completeSQL(body string) string {
	// The fencing check: only the holder of the key's current lock
	// completes it.
	fence := "lock_id = $3"
	if s.Flaws.NoFencing {
		fence = "$3::text IS NOT NULL"
	}
	if s.Flaws.JSONBReplay {
		body = "(" + body + ")::jsonb::text" // the mistake: jsonb reorders the members
	}
	return `
		UPDATE idempotency_keys
		SET status = 'completed', response_status = $4, response_body = ` + body + `, lock_id = NULL, locked_until = NULL
		WHERE user_id = $1 AND key = $2 AND ` + fence
}

// sqlstateLostLock is the error the fenced completion of a pipelined
// transfer raises when the key's lock is no longer the caller's.
const sqlstateLostLock = "BS001"

// QueueComplete is Complete for a transfer on a pipeline: it queues the
// key's completion with out's answer behind the transfer's writes, to be
// sent with them and the COMMIT in one round trip. Since the COMMIT is
// already on its way when the UPDATE's answer comes back, the fencing
// check cannot be a count read afterwards: if the UPDATE completes no key,
// the statement fails (bank_fail), PostgreSQL skips the COMMIT and the
// transaction rolls back, transfer included; the caller's error is then
// ErrLostLock, as from Complete.
func (s *Store) QueueComplete(p *bank.Pipeline, userID int64, key, lockID string, out *bank.Outcome) {
	body, bodyArgs := out.BodySQL(5)
	sql := `
		WITH completed AS (` + s.completeSQL(body) + `
		RETURNING true)
		SELECT CASE WHEN EXISTS (SELECT FROM completed) THEN true
		ELSE bank_fail('` + sqlstateLostLock + `', 'lost the idempotency lock; rolling back') END`
	p.Queue(sql, append([]any{s.scope(userID), key, lockID, out.Status()}, bodyArgs...)...)
}

// lostLock turns the fenced completion's failure into ErrLostLock.
func lostLock(err error) error {
	if bank.SQLState(err) == sqlstateLostLock {
		return ErrLostLock
	}
	return err
}

// Release gives the key up after an unexpected failure, so that a retry can
// run the request again: a 5xx says nothing about the request and is never
// stored. Only the current holder's claim is deleted.
func (s *Store) Release(ctx context.Context, db bank.Querier, userID int64, key, lockID string) error {
	_, err := db.Exec(ctx, "DELETE FROM idempotency_keys WHERE user_id = $1 AND key = $2 AND lock_id = $3",
		s.scope(userID), key, lockID)
	if err != nil {
		return fmt.Errorf("release key: %w", err)
	}
	return nil
}

// Cleanup is the scheduled job: it deletes keys created more than retention
// ago that are completed or whose lock has expired, and returns their names.
// A key whose lock is still valid is never deleted, however old: its holder
// may be about to complete it. Age and expiry are measured on the database's
// clock; now, the calling server's own clock, is read only by the AppClock
// mistake (see Begin).
func (s *Store) Cleanup(ctx context.Context, db bank.Querier, retention time.Duration, now time.Time) ([]string, error) {
	rows, err := db.Query(ctx, `
		DELETE FROM idempotency_keys
		USING (SELECT coalesce($2::timestamptz, bank_now()) AS t) AS clock
		WHERE created_at < clock.t - $1::interval AND (status = 'completed' OR locked_until < clock.t)
		RETURNING key`, retention, s.clock(now))
	if err != nil {
		return nil, fmt.Errorf("clean up keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("clean up keys: %w", err)
	}
	return keys, nil
}

// SeededLockIDs returns a goroutine-safe generator of fencing tokens drawn
// from seed, so that a run's lock ids repeat with its seed.
func SeededLockIDs(seed uint64) func() string {
	var mu sync.Mutex
	r := mrand.New(mrand.NewPCG(seed, 0x6c6f636b))
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("lock-%016x", r.Uint64())
	}
}
