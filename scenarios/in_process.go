package scenarios

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5/pgconn"
)

// The stories that call the bank in process (partial-failure, rules) have
// no network to trace: these tell their pictures the same lanes the others
// have — the user's app, the server, the database — from what each call
// did.

// newDelivery numbers one in-process request, so that a picture keeps its
// pieces together.
func (r *Run) newDelivery() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries++
	return r.deliveries
}

// sendDirect tells the pictures that user's app sent text to the server.
func (r *Run) sendDirect(user int64, text string) int {
	id := r.newDelivery()
	r.emit(Event{Kind: KindSend, From: userName(user), To: "server", Delivery: id, Text: text})
	return id
}

// databaseDirect tells the pictures what the server did in the database
// for request id.
func (r *Run) databaseDirect(id int, text string) {
	r.emit(Event{Kind: KindDatabase, From: "server", To: r.databaseLane(), Delivery: id, Text: text})
}

// answerDirect tells the pictures what the server answered user's app.
func (r *Run) answerDirect(id int, user int64, text string) {
	r.emit(Event{Kind: KindAnswer, From: "server", To: userName(user), Delivery: id, Text: text})
}

// tracedStatements is q telling the pictures each statement the server
// sends, with what came of it: a story about statements one at a time
// (partial-failure) draws each one.
type tracedStatements struct {
	bank.Querier
	r  *Run
	id int
}

func (t tracedStatements) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Querier.Exec(ctx, sql, args...)
	text := statementText(sql, args)
	if err != nil {
		text += ": ERROR " + pgMessage(err)
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.ConstraintName != "" {
			// The story narrates the whole message; the picture names
			// the rule broken.
			text = statementText(sql, args) + ": ERROR, violates " + pg.ConstraintName
		}
	} else {
		text += ": " + plural(int(tag.RowsAffected()), "row", "rows") + ""
	}
	t.r.databaseDirect(t.id, text)
	return tag, err
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// statementText is sql with its arguments in place and its spaces
// collapsed, as a person would type it.
func statementText(sql string, args []any) string {
	s := placeholder.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		if n < 1 || n > len(args) {
			return p
		}
		switch v := args[n-1].(type) {
		case string:
			return "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case nil:
			return "NULL"
		default:
			return fmt.Sprint(v)
		}
	})
	s = strings.Join(strings.Fields(s), " ")
	// The lesson's statements, shortened to what differs between them: the
	// account, the sign, the amount.
	if m := addToColumn.FindStringSubmatch(s); m != nil {
		if kobo, err := strconv.ParseInt(m[4], 10, 64); err == nil {
			sign := "+"
			if m[3] == "-" {
				sign = "−"
			}
			return fmt.Sprintf("UPDATE %s %s%s WHERE %s", m[1], sign, bank.Naira(kobo), m[5])
		}
	}
	if m := insertColumns.FindStringSubmatch(s); m != nil {
		return "INSERT INTO " + m[1] + " VALUES " + m[2]
	}
	return s
}

var (
	addToColumn   = regexp.MustCompile(`^UPDATE (\w+) SET (\w+) = \w+ ([+-]) (\d+) WHERE (.+)$`)
	insertColumns = regexp.MustCompile(`^INSERT INTO (\w+) \([^)]*\) VALUES (\(.*\))$`)
)
