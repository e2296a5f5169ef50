// Package outbox is what a transfer causes beyond its own transaction, and
// the systems it causes it in: the lesson's last section ("Side effects
// outside the database") and the third seed article's outbox, broker, Redis
// lock and idempotent consumers.
//
// Everything in PostgreSQL is real: the outbox table, written in the
// transfer's own transaction; the dispatcher's claim with FOR UPDATE SKIP
// LOCKED, its lease on the database's clock and its claim token; the
// consumer's processed-events marker, committed with its effect; the orders
// of the mark-shipped exercise. Everything outside PostgreSQL is in-process
// and deterministic, standing in for a server bank-sim does not run: the SMS
// provider (Provider), the message log (Log, for Kafka) and the lock service
// (Locks, for Redis). Each keeps its own record of what it was asked, which
// is what the invariants count.
//
// The package knows nothing of idempotency keys, HTTP or the command line;
// the transfer handler reaches it through idem.Effects.
package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/banksim/bank-sim/bank"
)

// Schema is the tables of the side effects, created in the bank's template
// next to bank.Schema.
//
// outbox.transfer_id is the simulator's oracle as much as the article's
// aggregateId: the checker joins it to transfers to prove that a row exists
// if and only if its transfer committed. It has no foreign key on purpose: a
// row for a transfer that does not exist is a failure to be shown, not one
// PostgreSQL should refuse, and the mistakes that make one must be able to.
//
// outbox_attempts records every claim of a row: who, with which token, when,
// until when, and how it ended, so a story can show a takeover and the
// checker can tell a takeover after a lease expired from two dispatchers
// holding one row at once. seq orders claims and settlements: in a scenario
// the database's clock stands still, so timestamps alone cannot.
//
// attempts counts claims, failures the sends that failed: only failures
// count towards giving up, so a row whose dispatchers crashed or stalled is
// not failed for their sake.
//
// notifications has no unique constraint on event_id: the consumer's
// processed_events marker is the defence, and a constraint here would hide
// its absence.
const Schema = `
CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('sms', 'event')),
  transfer_id bigint NOT NULL,
  user_id bigint NOT NULL,
  topic text NOT NULL DEFAULT '',
  msg_key text NOT NULL DEFAULT '',
  payload text NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  failures integer NOT NULL DEFAULT 0,
  claim_token text,
  claimed_by text,
  claimed_until timestamptz,
  next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
  last_error text,
  done_at timestamptz,
  failed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT bank_now()
);
CREATE INDEX outbox_pending ON outbox (id) WHERE done_at IS NULL AND failed_at IS NULL;
CREATE TABLE outbox_attempts (
  seq bigserial PRIMARY KEY,
  outbox_id bigint NOT NULL,
  attempt integer NOT NULL,
  dispatcher text NOT NULL,
  claim_token text NOT NULL,
  claimed_at timestamptz NOT NULL,
  lease_until timestamptz NOT NULL,
  settled_seq bigint,
  outcome text
);
CREATE INDEX outbox_attempts_row ON outbox_attempts (outbox_id, claim_token);
CREATE TABLE processed_events (
  consumer text NOT NULL,
  event_id text NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT bank_now(),
  PRIMARY KEY (consumer, event_id)
);
CREATE TABLE notifications (
  id bigserial PRIMARY KEY,
  consumer text NOT NULL,
  event_id text NOT NULL,
  transfer_id bigint NOT NULL,
  account_id bigint NOT NULL,
  text text NOT NULL
);
CREATE TABLE orders (
  id integer PRIMARY KEY,
  status text NOT NULL CHECK (status IN ('paid', 'shipped', 'cancelled'))
);
`

// Tables are the tables Schema creates, for a reset that empties them.
var Tables = []string{"outbox", "outbox_attempts", "processed_events", "notifications", "orders"}

// Setup creates Schema.
func Setup(ctx context.Context, q bank.Querier) error {
	if _, err := q.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create the outbox schema: %w", err)
	}
	return nil
}

// SchemaVersion identifies Schema, for the template's version.
func SchemaVersion() string {
	h := sha256.Sum256([]byte(Schema))
	return hex.EncodeToString(h[:])[:12]
}
