package postgres

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// keptCount counts the kept databases of version.
func keptCount(t *testing.T, s *Server, version string) int {
	t.Helper()
	c, err := pgx.Connect(context.Background(), s.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)", keptPrefixOf(version)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database kept at the end of a run is taken by the next run in the slot,
// as its last user left it, under a name of the new run; killed while it
// uses it, that run leaves it to be dropped like any other leftover.
func inSlotKeptDatabaseIsTakenByTheNextRun(t *testing.T, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl := testTemplate
	tpl.Version = "kept-" + randHex(4) // nobody else's kept databases
	s, _ := start(t, Options{CacheDir: dir})
	if db, err := s.TakeKept(ctx, tpl, "first"); err != nil || db != nil {
		t.Fatalf("TakeKept on a cluster that keeps nothing of this version: %v, %v", db, err)
	}
	db, err := s.CreateDatabase(ctx, tpl, "first")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE accounts SET owner = 'left by the first run' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx) // its backend exits a moment later: Keep waits for it
	if err := db.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, db.Name) || keptCount(t, s, tpl.Version) != 1 {
		t.Fatalf("after Keep: %s exists %v, %d kept, want it renamed into the kept names",
			db.Name, exists(t, s, db.Name), keptCount(t, s, tpl.Version))
	}
	slot := s.slotPath
	s.Close()

	s2, _ := start(t, Options{CacheDir: dir})
	if s2.slotPath != slot {
		t.Fatalf("slot %s, want %s", s2.slotPath, slot)
	}
	taken, err := s2.TakeKept(ctx, tpl, "second")
	if err != nil || taken == nil {
		t.Fatalf("TakeKept after a restart: %v, %v; the kept database should have survived the start's sweep", taken, err)
	}
	if !strings.HasPrefix(taken.Name, s2.owner.name("")) || keptCount(t, s2, tpl.Version) != 0 {
		t.Fatalf("taken as %s with %d still kept, want a name of this run and none kept", taken.Name, keptCount(t, s2, tpl.Version))
	}
	c, err = pgx.Connect(ctx, taken.URL)
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	if err := c.QueryRow(ctx, "SELECT owner FROM accounts WHERE id = 1").Scan(&owner); err != nil || owner != "left by the first run" {
		t.Fatalf("the taken database is not the kept one: owner %q, %v", owner, err)
	}
	c.Close(ctx)
	if again, err := s2.TakeKept(ctx, tpl, "third"); err != nil || again != nil {
		t.Fatalf("one kept database was taken twice: %v, %v", again, err)
	}

	// Killed while it holds it: the next start drops it.
	s2.proc.Signal(syscall.SIGKILL)
	<-s2.done
	waitDead(t, s2.postPID, deathBound)
	s3, _ := start(t, Options{CacheDir: dir})
	if exists(t, s3, taken.Name) {
		t.Errorf("%s, in use by a killed run, was not dropped", taken.Name)
	}
	if db, err := s3.TakeKept(ctx, tpl, "fourth"); err != nil || db != nil {
		t.Errorf("a database in use by a killed run was kept: %v, %v", db, err)
	}
}

// An embedded cluster keeps at most MaxKept databases of a version; Keep
// drops the others.
func TestKeepKeepsAtMostMaxKept(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl := testTemplate
	tpl.Version = "kept-" + randHex(4)
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	var last *Database
	for range MaxKept + 1 {
		db, err := s.CreateDatabase(ctx, tpl, "many")
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Keep(ctx); err != nil {
			t.Fatal(err)
		}
		last = db
	}
	if n := keptCount(t, s, tpl.Version); n != MaxKept {
		t.Errorf("%d kept, want %d", n, MaxKept)
	}
	if exists(t, s, last.Name) {
		t.Errorf("%s, one too many to keep, was neither kept nor dropped", last.Name)
	}
}
