package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Which worker errors a run's own outage explains: only those that say
// PostgreSQL was out of reach, and only in a run that takes it away. Each
// case alone catches a one-line slip in lostPostgres or workerErrors: every
// PgError taken for an outage (42P01 would be excused in a --kill-postgres
// run), a class 08 or shutdown code missed (a crash's errors would make the
// run INCONCLUSIVE), a wrapped EOF or a network error not unwrapped, or the
// run's outages not asked.
func TestOnlyALostPostgresIsExplainedByAnOutage(t *testing.T) {
	pgErr := func(code string) error {
		return fmt.Errorf("claim outbox rows: %w", &pgconn.PgError{Code: code, Message: "m"})
	}
	cases := []struct {
		name string
		err  error
		lost bool
	}{
		{"no such table", pgErr("42P01"), false},
		{"no permission", pgErr("42501"), false},
		{"deadlock", pgErr("40P01"), false},
		{"admin shutdown", pgErr("57P01"), true},
		{"crash shutdown", pgErr("57P02"), true},
		{"cannot connect now", pgErr("57P03"), true},
		{"connection failure", pgErr("08006"), true},
		{"read-only after a failover", pgErr("25006"), true},
		{"EOF mid-query", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"conn closed", fmt.Errorf("begin: %w", pgconn.ErrConnClosed), true},
		{"a bug of the harness", errors.New("outbox: row 7 has no token"), false},
	}
	var errs []error
	lost := 0
	for _, c := range cases {
		if got := lostPostgres(c.err); got != c.lost {
			t.Errorf("%s (%v): lost PostgreSQL %v, want %v", c.name, c.err, got, c.lost)
		}
		errs = append(errs, c.err)
		if c.lost {
			lost++
		}
	}
	if w := workerErrors(errs, true); w.Count != len(cases) || w.Expected != lost {
		t.Errorf("in a run that takes PostgreSQL away: %d errors, %d expected; want %d, %d", w.Count, w.Expected, len(cases), lost)
	}
	if w := workerErrors(errs, false); w.Expected != 0 || w.Unexplained() != len(cases) {
		t.Errorf("in a run that takes nothing away: %d expected, %d unexplained; want 0, %d", w.Expected, w.Unexplained(), len(cases))
	}
	if w := workerErrors(nil, true); w != nil || w.Unexplained() != 0 {
		t.Errorf("no errors: %+v, want nil", w)
	}
}

// A dispatcher that fails on every claim fails every millisecond: the
// history keeps the count, and a bounded number of distinct messages of each
// kind, each cut short, whatever the number of errors.
func TestWorkerErrorsAreBounded(t *testing.T) {
	var errs []error
	for i := range 5000 {
		errs = append(errs, fmt.Errorf("renew the claim of outbox row %d: %w", i%7, &pgconn.PgError{Code: "42P01"}))
	}
	long := errors.New(string(make([]byte, 10*maxWorkerErrorLen)))
	errs = append(errs, long, long)
	w := workerErrors(errs, false)
	if w.Count != 5002 || len(w.First) != maxWorkerErrors {
		t.Fatalf("%d errors kept as %d distinct messages; want 5002 counted, %d kept", w.Count, len(w.First), maxWorkerErrors)
	}
	sum := 0
	for _, e := range w.First {
		sum += e.Count
		if n := len([]rune(e.Message)); n > maxWorkerErrorLen+1 {
			t.Errorf("a message of %d runes kept, want at most %d", n, maxWorkerErrorLen+1)
		}
	}
	if want := 3 * 5000 / 7; sum < want-3 || sum > want+3 {
		t.Errorf("the %d kept messages count %d errors, want each its own (about %d)", len(w.First), sum, want)
	}
	lines := w.unexplained()
	if last := lines[len(lines)-1]; last != fmt.Sprintf("the side effects' workers hit %d more errors that no outage of the run explains", 5002-sum) {
		t.Errorf("the last line %q does not count the errors not shown (%d)", last, 5002-sum)
	}
}
