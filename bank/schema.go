// Package bank is the lesson's bank: its tables, its three accounts, the
// transfer with every business rule, and the invariants a correct bank keeps.
// It knows nothing about idempotency keys, faults or the command line; callers
// hand it a transaction (or, for the deliberately broken forms, a bare
// connection) and get back a Response.
package bank

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema creates the lesson's three tables with their CHECK constraints.
//
// transfers.intent is not part of the lesson: it is the simulator's oracle, a
// label that the harness attaches to each client intent (through the context,
// see WithIntent) so that the checker can count, from the database alone, how
// many times one intent moved money. A production bank has no such column; the
// idempotency key is how it recognises an intent.
//
// idempotency_keys.response_body is text, not the lesson's jsonb: jsonb keeps
// objects in its own order, so a replay would not be the original answer
// byte for byte (the lesson says to use text when that matters; a signed or
// hashed body needs it, and a client may compare). See idem.Flaws.JSONBReplay.
//
// bank_now() is the time every lock and every key's age is measured on: the
// database's clock, so that app servers whose clocks disagree still agree on
// when a lock expires and how old a key is. sim_clock is the simulator's: a
// scenario stops the database's clock and moves it by hand, which is how its
// "31 seconds later" reaches the database without waiting (see SetClock). In
// production stopped_at stays NULL and bank_now() is now().
//
// bank_now() is PL/pgSQL, not SQL, although its body is one SELECT: a SQL
// function that reads a table is not inlined, and PostgreSQL 15 parses and
// plans its body again on every execution of the statement that calls it,
// where PL/pgSQL plans it once per session. Every claim calls it: with the
// SQL function a claim that finds its key (a replay) ran at about half the
// rate of the same INSERT calling now() (pgbench, 4 clients).
//
// bank_fail(code, message) raises an error: a statement of a pipelined
// transaction calls it when what it finds means the transaction must not
// commit, because the COMMIT queued behind it is already on its way and an
// error is the only thing that stops it (see idem's fenced completion).
const Schema = `
CREATE TABLE accounts (
  id integer PRIMARY KEY,
  owner_id integer NOT NULL,
  holder text NOT NULL,
  status text NOT NULL CHECK (status IN ('active', 'frozen', 'closed')),
  balance_kobo bigint NOT NULL CHECK (balance_kobo >= 0)
);
CREATE TABLE transfers (
  id serial PRIMARY KEY,
  from_account integer NOT NULL REFERENCES accounts (id),
  to_account integer NOT NULL REFERENCES accounts (id),
  amount_kobo bigint NOT NULL CHECK (amount_kobo > 0),
  intent text
);
CREATE INDEX transfers_intent ON transfers (intent);
CREATE TABLE idempotency_keys (
  user_id integer NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  status text NOT NULL CHECK (status IN ('in_progress', 'completed')),
  lock_id text,
  locked_until timestamptz,
  response_status integer,
  response_body text,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
CREATE TABLE sim_clock (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  stopped_at timestamptz
);
INSERT INTO sim_clock DEFAULT VALUES;
CREATE FUNCTION bank_now() RETURNS timestamptz LANGUAGE plpgsql STABLE
  AS $$ BEGIN RETURN coalesce((SELECT stopped_at FROM sim_clock), now()); END $$;
CREATE FUNCTION bank_fail(code text, message text) RETURNS boolean LANGUAGE plpgsql
  AS $$ BEGIN RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message; END $$;
`

// Account is one row of the accounts table.
type Account struct {
	ID          int64  `json:"id"`
	OwnerID     int64  `json:"ownerId"`
	Holder      string `json:"holder"`
	Status      string `json:"status"`
	BalanceKobo int64  `json:"balanceKobo"`
}

// FirstName is the name the balances line uses ("Ada" for "Ada Obi").
func (a Account) FirstName() string {
	for i, r := range a.Holder {
		if r == ' ' {
			return a.Holder[:i]
		}
	}
	return a.Holder
}

// LessonAccounts is the bank every scenario opens with: Ada and Bola active,
// Chidi frozen, ₦75,000 in all.
var LessonAccounts = []Account{
	{ID: 1, OwnerID: 1, Holder: "Ada Obi", Status: "active", BalanceKobo: 5_000_000},
	{ID: 2, OwnerID: 2, Holder: "Bola Ade", Status: "active", BalanceKobo: 500_000},
	{ID: 3, OwnerID: 3, Holder: "Chidi Eze", Status: "frozen", BalanceKobo: 2_000_000},
}

// Querier is what bank needs from PostgreSQL: a *pgx.Conn, a *pgxpool.Pool
// and a pgx.Tx all satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a Querier that can also open transactions: a *pgxpool.Pool or a
// *pgx.Conn.
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Setup creates the schema and the lesson's accounts. It runs once per
// template database; scenario databases are cloned from that template.
func Setup(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	for _, a := range LessonAccounts {
		if _, err := q.Exec(ctx,
			"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES ($1, $2, $3, $4, $5)",
			a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo); err != nil {
			return fmt.Errorf("seed account %d: %w", a.ID, err)
		}
	}
	return nil
}

// SchemaVersion identifies Schema and the lesson's accounts; a template
// database built from an older version is never reused.
func SchemaVersion() string {
	h := sha256.New()
	h.Write([]byte(Schema))
	for _, a := range LessonAccounts {
		fmt.Fprintf(h, "%d/%d/%s/%s/%d;", a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
