package zoo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBMember is a reference target whose money and keys are in PostgreSQL
// (the lesson's bank schema, and a zoo_keys table of its own): the members
// whose defect shows only when the database fails under them, as probe's
// db-faults check makes it fail through its proxy.
type DBMember struct {
	Name, Class string
	Defect      DBDefect
}

// DBDefect is where a database member departs from the correct one; the
// zero value is correct: the key, the transfer and its answer are written
// in one transaction, so a failure anywhere leaves either all of them or
// none.
type DBDefect struct {
	// StoreServerErrors stores a 500 as the key's answer when the database
	// fails, as a middleware that caches whatever the handler returned
	// does: the retry after a passing failure is told 500 for as long as
	// keys live.
	StoreServerErrors bool
	// ClaimApart claims the key in a statement of its own, committed before
	// the transfer, and never releases or expires the claim: a failure
	// after the claim leaves the key answering 409 (in progress) forever.
	ClaimApart bool
}

// DBCorrect is the correct database member.
var DBCorrect = DBMember{Name: "db-correct"}

// StoredServerError stores the 500 of a database failure as the key's
// final answer (issue 27: the README's own wiring of one library replays it
// for 24 hours).
var StoredServerError = DBMember{
	Name:   "stored-server-error",
	Class:  "a server error from a passing database failure is stored as the key's final answer",
	Defect: DBDefect{StoreServerErrors: true},
}

// LockedPastTTL leaves the key claimed after a database failure (issue 27:
// the other wiring of that library answers 409 for 24 hours).
var LockedPastTTL = DBMember{
	Name:   "locked-past-ttl",
	Class:  "a key claimed before a database failure stays locked (409) past its lock time",
	Defect: DBDefect{ClaimApart: true},
}

// DBMembers lists the database members, the correct one first.
func DBMembers() []DBMember { return []DBMember{DBCorrect, StoredServerError, LockedPastTTL} }

// SetupDB creates the members' key table in the lesson's bank at db, or
// empties it: a member starts knowing no key, as the bank it is given
// (the tests' banks are recycled, and the recycler knows only the lesson's
// tables). Run it on a direct connection, before any fault proxy is in the
// way.
func SetupDB(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS zoo_keys (
  user_id integer NOT NULL,
  key text NOT NULL,
  fingerprint text NOT NULL,
  status integer,  -- NULL: claimed, no answer yet
  body text,
  PRIMARY KEY (user_id, key))`)
	if err == nil {
		_, err = db.Exec(ctx, "DELETE FROM zoo_keys")
	}
	return err
}

// userIDs are the lesson's users, as bank-sim's demo tokens name them.
var userIDs = map[string]int64{"token-ada": 1, "token-bola": 2, "token-chidi": 3}

// StartDB serves m on a free port of 127.0.0.1 over db (the lesson's bank,
// set up with SetupDB). Close it when done.
func StartDB(m DBMember, db *pgxpool.Pool) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{h: &dbHandler{d: m.Defect, db: db}, addr: ln.Addr().String()}
	s.serve(ln)
	return s, nil
}

type dbHandler struct {
	d  DBDefect
	db *pgxpool.Pool
}

// errReplay ends a transaction that found its key already answered.
var errReplay = errors.New("the key has an answer")

func (h *dbHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	user, ok := userIDs[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		write(w, 401, map[string]any{"code": "unauthorized"})
		return
	}
	if req.Method == "GET" && strings.HasPrefix(req.URL.Path, "/accounts/") {
		var b int64
		err := h.db.QueryRow(ctx, "SELECT balance_kobo FROM accounts WHERE id::text = $1 AND owner_id = $2",
			strings.TrimPrefix(req.URL.Path, "/accounts/"), user).Scan(&b)
		if err != nil {
			write(w, 404, map[string]any{"code": "account_not_found"})
			return
		}
		write(w, 200, map[string]any{"balanceKobo": b})
		return
	}
	key := req.Header.Get("Idempotency-Key")
	if req.Method != "POST" || req.URL.Path != "/transfers" || key == "" {
		write(w, 400, map[string]any{"code": "idempotency_key_required"})
		return
	}
	raw, err := io.ReadAll(io.LimitReader(req.Body, 1<<16))
	if err != nil {
		return
	}
	t, bad := bank.ParseTransferRequest(raw)
	if bad != nil {
		respond(w, *bad, false)
		return
	}
	fp := fmt.Sprintf("%d>%d:%d", t.From, t.To, t.AmountKobo)
	if h.d.ClaimApart {
		// The claim commits on its own: from here a failure leaves it.
		tag, err := h.db.Exec(ctx, "INSERT INTO zoo_keys (user_id, key, fingerprint) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", user, key, fp)
		if err != nil {
			write(w, 500, map[string]any{"code": "internal", "message": err.Error()})
			return
		}
		if tag.RowsAffected() == 0 {
			h.replay(ctx, w, user, key, fp)
			return
		}
	}
	var r bank.Response
	err = pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
		if !h.d.ClaimApart {
			// The key is inserted in the transaction of the transfer: a
			// second request with it waits here for the first to commit
			// or roll back.
			tag, err := tx.Exec(ctx, "INSERT INTO zoo_keys (user_id, key, fingerprint) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", user, key, fp)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errReplay
			}
		}
		var err error
		if r, err = bank.Transfer(ctx, tx, user, t); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE zoo_keys SET status = $3, body = $4 WHERE user_id = $1 AND key = $2", user, key, r.Status, string(r.Body))
		return err
	})
	switch {
	case errors.Is(err, errReplay):
		h.replay(ctx, w, user, key, fp)
	case err != nil:
		if h.d.StoreServerErrors {
			_, _ = h.db.Exec(context.WithoutCancel(ctx), `INSERT INTO zoo_keys (user_id, key, fingerprint, status, body) VALUES ($1, $2, $3, 500, $4)
ON CONFLICT (user_id, key) DO UPDATE SET status = 500, body = $4`, user, key, fp, `{"code":"internal"}`)
		}
		write(w, 500, map[string]any{"code": "internal", "message": err.Error()})
	default:
		respond(w, r, false)
	}
}

// replay answers a key already seen: its stored answer, 409 while it has
// none, 422 when it was first used for another request.
func (h *dbHandler) replay(ctx context.Context, w http.ResponseWriter, user int64, key, fp string) {
	var first string
	var status *int
	var body *string
	err := h.db.QueryRow(ctx, "SELECT fingerprint, status, body FROM zoo_keys WHERE user_id = $1 AND key = $2", user, key).Scan(&first, &status, &body)
	switch {
	case err != nil:
		write(w, 500, map[string]any{"code": "internal", "message": err.Error()})
	case first != fp:
		write(w, 422, map[string]any{"code": "idempotency_key_reused"})
	case status == nil:
		write(w, 409, map[string]any{"code": "request_in_progress"})
	default:
		respond(w, bank.Response{Status: *status, Body: json.RawMessage(*body)}, true)
	}
}

func respond(w http.ResponseWriter, r bank.Response, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}
