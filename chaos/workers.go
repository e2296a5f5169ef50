package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// WorkerErrors are the errors the side effects' workers (the outbox's
// dispatchers and the consumer) hit in the fault phase. A worker that errs
// leaves its rows or events for later and carries on, and healing drains
// what it left, so no rule sees them: a run whose dispatchers failed on
// every claim would show at most an outbox row left, with no cause, and one
// whose dispatchers failed for a while and then recovered nothing at all.
// Those that lost PostgreSQL in a run that takes it away (KillPostgres, a
// failover, Options.Outages) are the run's own doing; any other, an error
// PostgreSQL answered (a missing table or column, a permission) or a lost
// connection in a run that took nothing away, leaves the run unable to
// vouch for its side effects (Coverage.Unexplained).
type WorkerErrors struct {
	// Count is how many there were; Expected how many of them lost
	// PostgreSQL while the run had it away.
	Count    int `json:"count"`
	Expected int `json:"expected"`
	// First are the first distinct messages, at most maxWorkerErrors
	// expected ones and as many others, each with how often it came.
	First []WorkerError `json:"first"`
}

// WorkerError is one message of WorkerErrors.
type WorkerError struct {
	Message  string `json:"message"`
	Count    int    `json:"count"`
	Expected bool   `json:"expected,omitempty"`
}

// maxWorkerErrors bounds the distinct messages kept of each kind, and
// maxWorkerErrorLen each message: a worker that fails on every claim
// fails every millisecond.
const (
	maxWorkerErrors   = 3
	maxWorkerErrorLen = 300
)

// workerErrors sums errs up; outages says whether the run took PostgreSQL
// away. Nil for none.
func workerErrors(errs []error, outages bool) *WorkerErrors {
	if len(errs) == 0 {
		return nil
	}
	w := &WorkerErrors{Count: len(errs)}
	kept := map[WorkerError]int{} // message and kind → index in First
	var kinds [2]int
	for _, err := range errs {
		e := WorkerError{Message: err.Error(), Expected: outages && lostPostgres(err)}
		if r := []rune(e.Message); len(r) > maxWorkerErrorLen {
			e.Message = string(r[:maxWorkerErrorLen]) + "…"
		}
		k := 0
		if e.Expected {
			w.Expected++
			k = 1
		}
		if i, ok := kept[e]; ok {
			w.First[i].Count++
			continue
		}
		if kinds[k] == maxWorkerErrors {
			continue
		}
		kinds[k]++
		kept[e] = len(w.First)
		e.Count = 1
		w.First = append(w.First, e)
	}
	return w
}

// lostPostgres reports whether err says PostgreSQL was out of reach: no
// connection could be made, the one in use died, the server was shutting
// down or starting up, or (a failover) the server reached was no longer
// the primary. An error PostgreSQL answered otherwise (42P01 no such table,
// 42703 no such column, 42501 no permission, a syntax error) says it was
// there: the run's outages do not explain it.
func lostPostgres(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "25006":
			return true
		}
		return strings.HasPrefix(pg.Code, "08")
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
}

// Unexplained is how many of the errors the run's outages do not explain.
func (w *WorkerErrors) Unexplained() int {
	if w == nil {
		return 0
	}
	return w.Count - w.Expected
}

// Line says in one line how many errors the workers hit and how many the
// run's outages explain.
func (w *WorkerErrors) Line() string {
	s := fmt.Sprintf("the outbox's dispatchers and the consumer hit %s", plural(w.Count, "error", "errors"))
	switch {
	case w.Expected == w.Count:
		return s + ", each PostgreSQL out of reach, as the run's own outage explains"
	case w.Expected > 0:
		return s + fmt.Sprintf(": %d PostgreSQL out of reach, as the run's own outage explains, and %d that no outage of the run explains", w.Expected, w.Unexplained())
	}
	return s + ", none of which an outage of the run explains"
}

// unexplained are the lines Coverage.Unexplained lists: each distinct
// message the run's outages do not explain, and how many more there were.
func (w *WorkerErrors) unexplained() []string {
	var out []string
	shown := 0
	for _, e := range w.First {
		if !e.Expected {
			out = append(out, fmt.Sprintf("the side effects' workers hit an error no outage of the run explains (%d×): %s", e.Count, e.Message))
			shown += e.Count
		}
	}
	if n := w.Unexplained() - shown; n > 0 {
		more := "more errors"
		if n == 1 {
			more = "more error"
		}
		out = append(out, fmt.Sprintf("the side effects' workers hit %d %s that no outage of the run explains", n, more))
	}
	return out
}
