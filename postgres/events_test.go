package postgres

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// notes collects what the supervisor says on its own.
func notes(s *Server) chan string {
	ch := make(chan string, 8)
	s.Notify(func(m string) { ch <- m })
	return ch
}

func nextNote(t *testing.T, ch chan string, what string) string {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		t.Fatalf("waited 60 s for the supervisor to say %s", what)
	}
	return ""
}

// Issue 19 item 5: a postmaster SIGKILLed under a running bank-sim (kill
// -9, the OOM killer) is started again by its supervisor on the same data
// directory and port, which says so; what was committed is still there,
// new connections work, and Close stops everything without an error.
func TestAKilledPostmasterIsStartedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	said := notes(s)
	db, err := s.CreateDatabase(ctx, testTemplate, "dies")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE accounts SET balance = 4321 WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)

	old := s.PostmasterPID()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m := nextNote(t, said, "that it started PostgreSQL again")
	t.Log(m)
	if !strings.Contains(m, "was killed by signal 9 (killed); bank-sim started it again") {
		t.Errorf("the supervisor says %q", m)
	}
	if now := s.PostmasterPID(); now == old || now == 0 || !alive(now) {
		t.Errorf("postmaster %d after the restart (was %d)", now, old)
	}
	select {
	case <-s.Lost():
		t.Fatalf("Lost closed after a restart: %s", s.LostReason())
	default:
	}
	c, err = pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("connecting after the restart: %v", err)
	}
	var bal int64
	err = c.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 7").Scan(&bal)
	c.Close(ctx)
	if err != nil || bal != 4321 {
		t.Fatalf("after the restart: balance %d (%v), want the committed 4321", bal, err)
	}
	if err := db.Drop(ctx); err != nil {
		t.Errorf("Drop after the restart: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after the restart: %v", err)
	}
	waitDead(t, s.PostmasterPID(), deathBound)
}

// When the postmaster cannot be started again (here its data directory
// has gone), the supervisor says why and exits: Lost is closed, and
// LostReason tells the truth. Lost is waited for first, as serve does: by
// then the supervisor's last line must have been read, however late a
// loaded machine ran its reader.
func TestAPostmasterThatCannotBeStartedAgainIsLost(t *testing.T) {
	t.Parallel()
	s, _ := start(t, Options{CacheDir: cacheDir(t)})
	said := notes(s)
	if err := os.Rename(s.dataDir, s.dataDir+".gone"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(s.dataDir+".gone", s.dataDir)
	pid := s.PostmasterPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost not closed a minute after the postmaster was killed")
	}
	reason := s.LostReason()
	t.Log(reason)
	var m string
	select {
	case m = <-said:
	default:
		t.Fatalf("Lost closed before the supervisor's reason was said; LostReason %q", reason)
	}
	if reason != m || !strings.Contains(reason, "was killed by signal 9 (killed), and bank-sim could not start it again") {
		t.Errorf("LostReason %q (said %q)", reason, m)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after a loss already reported: %v", err)
	}
	waitDead(t, pid, deathBound)
}
