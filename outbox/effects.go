package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// TransfersTopic is the topic transfer events are published to.
const TransfersTopic = "transfers"

// Kinds of outbox rows.
const (
	KindSMS   = "sms"
	KindEvent = "event"
)

// Row is one outbox row: something to send, recorded in the transaction that
// made it necessary.
type Row struct {
	ID         int64  `json:"id"`
	Kind       string `json:"kind"`
	TransferID int64  `json:"transferId"`
	UserID     int64  `json:"userId"`
	Topic      string `json:"topic,omitempty"`
	Key        string `json:"key,omitempty"`
	Payload    string `json:"payload"`
	Attempts   int    `json:"attempts"`
}

// Add inserts r into the outbox in tx, the caller's transaction: the row
// exists if and only if that transaction commits.
func Add(ctx context.Context, tx bank.Querier, r Row) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO outbox (kind, transfer_id, user_id, topic, msg_key, payload)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		r.Kind, r.TransferID, r.UserID, r.Topic, r.Key, r.Payload).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("add to the outbox: %w", err)
	}
	return id, nil
}

// Event is the body of a transfer event.
type Event struct {
	ID   string `json:"eventId,omitempty"`
	Type string `json:"type"`
	bank.Receipt
}

// Effects is what a committed transfer must cause beyond the database: an SMS
// to the sender ("You sent ₦10,000 to Bola") and an event on the transfers
// topic. The correct way records both as outbox rows in the transfer's own
// transaction; a dispatcher sends them later. It implements idem.Effects.
type Effects struct {
	// DB answers the lookups of the after-commit mistakes, which run with no
	// transaction.
	DB bank.Querier
	// SMS, when set, is where the SMS goes; none is sent when nil.
	SMS *Provider
	// Log, when set, is where the event goes; none is published when nil.
	Log   *Log
	Flaws Flaws
	// Note, when set, is told what happened where no client can see.
	Note func(format string, args ...any)
	// Committed, when set, is told each time a transfer has committed (its
	// outbox rows with it): a deterministic run kicks its idle dispatchers.
	Committed func()
}

func (e *Effects) note(format string, args ...any) {
	if e.Note != nil {
		e.Note(format, args...)
	}
}

// InTx runs in the transfer's transaction, after the transfer and before
// COMMIT.
func (e *Effects) InTx(ctx context.Context, tx pgx.Tx, userID int64, rc bank.Receipt) error {
	if e.SMS != nil {
		text, err := smsText(ctx, tx, rc)
		if err != nil {
			return err
		}
		switch {
		case e.Flaws.SMSInTransaction:
			// The mistake: the SMS leaves now; if the commit fails, the
			// customer is told about a transfer that never happened.
			sent, err := e.SMS.Send(ctx, Message{UserID: userID, Text: text, TransferID: rc.TransferID})
			if err != nil {
				return fmt.Errorf("send the SMS: %w", err)
			}
			e.note("the SMS left before COMMIT (SMS %d: %q)", sent.SMSID, text)
		case e.Flaws.SMSAfterCommit:
			// The mistake: nothing is recorded; AfterCommit sends it, if the
			// server lives that long.
		case e.Flaws.SMSPerOwnedAccount:
			// The mistake: the row is addressed through the transfer's
			// accounts that the sender owns, meant to find the sender's
			// one; a move between two accounts of the sender's matches both.
			if _, err := tx.Exec(ctx, `
				INSERT INTO outbox (kind, transfer_id, user_id, payload)
				SELECT $1, $2, owner_id, $3 FROM accounts WHERE id IN ($4, $5) AND owner_id = $6`,
				KindSMS, rc.TransferID, text, rc.From, rc.To, userID); err != nil {
				return fmt.Errorf("add to the outbox: %w", err)
			}
		default:
			if _, err := Add(ctx, tx, Row{Kind: KindSMS, TransferID: rc.TransferID, UserID: userID, Payload: text}); err != nil {
				return err
			}
		}
	}
	if e.Log != nil {
		switch {
		case e.Flaws.PublishInTransaction:
			// The mistake (the dual write): the event is out before COMMIT;
			// a rollback leaves it describing nothing.
			if err := e.publishDirect(ctx, rc); err != nil {
				return err
			}
			e.note("the event for transfer %d was published before COMMIT", rc.TransferID)
		case e.Flaws.PublishAfterCommit:
			// The mistake: published after COMMIT, if the server lives.
		case e.Flaws.NoEventForOwnAccounts && ownAccounts(ctx, tx, rc):
			// The mistake: a move between one customer's own accounts
			// is taken for nobody else's business, and writes no event.
			e.note("no event for transfer %d: both accounts are its sender's", rc.TransferID)
		default:
			payload, err := eventPayload("", rc)
			if err != nil {
				return err
			}
			if _, err := Add(ctx, tx, Row{Kind: KindEvent, TransferID: rc.TransferID, UserID: userID,
				Topic: TransfersTopic, Key: accountKey(rc.From), Payload: payload}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Refused runs in the transaction of a request the transfer's checks
// refused, which commits with the key's stored refusal. The correct way
// writes nothing: a refusal causes nothing beyond its answer. The
// SMSBeforeChecks mistake has written the SMS row before the checks, so it
// commits here, with no transfer to its name (transfer_id 0). The row needs
// the recipient's name: a request to an account that does not exist gets
// none.
func (e *Effects) Refused(ctx context.Context, txOf func() (pgx.Tx, error), userID int64, req bank.TransferRequest) error {
	if e.SMS == nil || !e.Flaws.SMSBeforeChecks {
		return nil
	}
	tx, err := txOf()
	if err != nil {
		return err
	}
	text, err := smsText(ctx, tx, bank.Receipt{From: req.From, To: req.To, AmountKobo: req.AmountKobo})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = Add(ctx, tx, Row{Kind: KindSMS, UserID: userID, Payload: text})
	return err
}

// AfterCommit runs once the transfer has committed. The correct way has
// nothing left to do: the outbox rows committed with the transfer.
func (e *Effects) AfterCommit(ctx context.Context, userID int64, rc bank.Receipt) {
	if e.Committed != nil {
		e.Committed()
	}
	if e.SMS != nil && e.Flaws.SMSAfterCommit {
		text, err := smsText(ctx, e.DB, rc)
		if err == nil {
			_, err = e.SMS.Send(ctx, Message{UserID: userID, Text: text, TransferID: rc.TransferID})
		}
		if err != nil {
			e.note("the SMS for transfer %d was not sent: %v", rc.TransferID, err)
		}
	}
	if e.Log != nil && e.Flaws.PublishAfterCommit {
		if err := e.publishDirect(ctx, rc); err != nil {
			e.note("the event for transfer %d was not published: %v", rc.TransferID, err)
		}
	}
}

// publishDirect is the mistakes' way: straight to the log, no outbox row. Its
// event id is the transfer's, the best such code has.
func (e *Effects) publishDirect(ctx context.Context, rc bank.Receipt) error {
	id := fmt.Sprintf("evt-t%d", rc.TransferID)
	payload, err := eventPayload(id, rc)
	if err != nil {
		return err
	}
	if _, err := e.Log.Publish(ctx, TransfersTopic, accountKey(rc.From), id, rc.TransferID, []byte(payload)); err != nil {
		return fmt.Errorf("publish the event: %w", err)
	}
	return nil
}

// ownAccounts reports whether rc's two accounts have one owner (false if
// the lookup fails: the event is written, as for any other transfer).
func ownAccounts(ctx context.Context, q bank.Querier, rc bank.Receipt) bool {
	var same bool
	err := q.QueryRow(ctx, "SELECT count(DISTINCT owner_id) = 1 FROM accounts WHERE id IN ($1, $2)", rc.From, rc.To).Scan(&same)
	return err == nil && same
}

// accountKey keys a transfer's event by the account it debits, so that one
// account's events stay in order.
func accountKey(account int64) string { return fmt.Sprintf("account-%d", account) }

func eventPayload(id string, rc bank.Receipt) (string, error) {
	b, err := json.Marshal(Event{ID: id, Type: "transfer.created", Receipt: rc})
	if err != nil {
		return "", fmt.Errorf("encode the event: %w", err)
	}
	return string(b), nil
}

// smsText is the lesson's SMS: "You sent ₦10,000 to Bola".
func smsText(ctx context.Context, q bank.Querier, rc bank.Receipt) (string, error) {
	var holder string
	if err := q.QueryRow(ctx, "SELECT holder FROM accounts WHERE id = $1", rc.To).Scan(&holder); err != nil {
		return "", fmt.Errorf("read the recipient's name: %w", err)
	}
	return fmt.Sprintf("You sent %s to %s", bank.Naira(rc.AmountKobo), bank.Account{Holder: holder}.FirstName()), nil
}
