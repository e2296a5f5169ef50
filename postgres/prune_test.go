package postgres

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// fakeExternalRun stands in for a bank-sim run on a server it does not own:
// it creates two scenario databases (and so its template) on the server at
// url, reports their names and its owner key, and waits to be killed.
func fakeExternalRun(url string) int {
	ctx := context.Background()
	s, err := Start(ctx, Options{URL: url})
	var names []string
	for i := 0; err == nil && i < 2; i++ {
		var db *Database
		db, err = s.CreateDatabase(ctx, testTemplate, fmt.Sprintf("run-%d", i))
		if err == nil {
			names = append(names, db.Name)
		}
	}
	if err != nil {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"error": err.Error()})
		return 1
	}
	for _, e := range s.tpls {
		names = append(names, e.name)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"names": names, "owner": s.owner.hex})
	select {}
}

type externalRun struct {
	cmd   *exec.Cmd
	Names []string // its databases, template included
	Owner string
	Error string
}

// startExternalRun runs fakeExternalRun in a child process, killed when the
// test ends if the test has not killed it.
func startExternalRun(t *testing.T, url string) *externalRun {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "BANK_SIM_TEST_EXTERNAL="+url)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(out).ReadBytes('\n')
		lines <- b
	}()
	r := &externalRun{cmd: cmd}
	select {
	case b := <-lines:
		if json.Unmarshal(b, r) != nil || r.Error != "" || len(r.Names) != 3 {
			t.Fatalf("external run: %s", b)
		}
	case <-time.After(time.Minute):
		t.Fatal("the external run did not report its databases within a minute")
	}
	return r
}

// kill SIGKILLs the run and waits until the server has noticed: its owner
// lock is released when its session ends.
func (r *externalRun) kill(t *testing.T, admin *pgx.Conn) {
	t.Helper()
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	key, _ := ownerOf(r.Names[0])
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; {
		held, err := heldKeys(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if !held[key] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still shows the killed run's lock %s after 30 s", r.Owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// userServer is an embedded server standing in for the user's own
// PostgreSQL, with a database of the user's that looks like bank-sim's but
// carries no owner mark, and an unmarked template of an older bank-sim.
func userServer(t *testing.T) (url string, admin *pgx.Conn, unmarked []string) {
	t.Helper()
	emb, _ := start(t, Options{CacheDir: warmCache(t)})
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, emb.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	// Only what the test makes: no templates of earlier tests.
	for _, n := range databases(t, admin) {
		for _, q := range []string{"ALTER DATABASE " + quote(n) + " IS_TEMPLATE false", "DROP DATABASE " + quote(n)} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	unmarked = []string{"bank_sim_tpl_0123abcd_5e0c2d4e8a1b", "bank_sim_users_own"} // as ORDER BY datname
	for _, q := range []string{
		"CREATE DATABASE bank_sim_users_own",
		"CREATE DATABASE bank_sim_tpl_0123abcd_5e0c2d4e8a1b IS_TEMPLATE true",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return emb.adminURL, admin, unmarked
}

func databases(t *testing.T, admin *pgx.Conn) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname LIKE 'bank_sim_%' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func requirePresent(t *testing.T, have []string, want []string, what string) {
	t.Helper()
	for _, n := range want {
		if !slices.Contains(have, n) {
			t.Errorf("%s: %s was dropped", what, n)
		}
	}
}

func requireAbsent(t *testing.T, have []string, gone []string, what string) {
	t.Helper()
	for _, n := range gone {
		if slices.Contains(have, n) {
			t.Errorf("%s: %s is still there", what, n)
		}
	}
}

// A SIGKILLed run on a server bank-sim does not own leaves its databases
// and its template (which plain DROP DATABASE refuses); the next run on that
// server drops them, and only them: a live run's databases and the
// databases without an owner mark stay.
func TestTheNextRunDropsWhatAKilledRunLeft(t *testing.T) {
	t.Parallel()
	url, admin, unmarked := userServer(t)
	killed := startExternalRun(t, url)
	live := startExternalRun(t, url)
	killed.kill(t, admin)

	have := databases(t, admin)
	requirePresent(t, have, killed.Names, "right after the kill (the leftovers this test is about)")

	next, err := Start(context.Background(), Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(next.Describe())
	if !strings.Contains(next.Describe(), "dropped 3 databases left by killed bank-sim runs") {
		t.Errorf("Describe does not say what was dropped: %q", next.Describe())
	}
	have = databases(t, admin)
	requireAbsent(t, have, killed.Names, "after the next run started")
	requirePresent(t, have, live.Names, "a live run's database")
	requirePresent(t, have, unmarked, "an unmarked database")

	// The live run ends normally: Close drops its own, the next run's
	// Close its own, and the unmarked ones are still there.
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	live.kill(t, admin)
	last, err := Start(context.Background(), Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	last.Close()
	have = databases(t, admin)
	requireAbsent(t, have, live.Names, "after the live run was killed too")
	if !slices.Equal(have, unmarked) {
		t.Errorf("left on the server: %v, want only the unmarked %v", have, unmarked)
	}
}

// PruneServer lists every bank_sim_* database with what it is, drops only
// the orphans, and with dryRun drops nothing.
func TestPruneServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, unmarked := userServer(t)
	// Started before any is killed: each Start drops the orphans it finds.
	// The killed run's databases are orphans, but one of them somebody is
	// connected to, which is not dropped: one run for both states.
	live := startExternalRun(t, url)
	busy := startExternalRun(t, url)
	busyConn, err := pgx.Connect(ctx, withDBName(url, busy.Names[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer busyConn.Close(ctx)
	busy.kill(t, admin)
	killed := busy.Names[1:]

	want := map[string]LeftoverState{}
	for _, n := range live.Names {
		want[n] = Live
	}
	for _, n := range unmarked {
		want[n] = Unmarked
	}
	want[busy.Names[0]] = OrphanInUse
	for _, n := range killed {
		want[n] = Orphan
	}
	// Should someone connect between the listing and the drop, the drop
	// itself refuses: no FORCE.
	racing := Leftover{Name: busy.Names[0], State: Orphan}
	dropOrphan(ctx, admin, &racing)
	if racing.Dropped || !isCode(racing.Err, "55006") {
		t.Errorf("dropping an orphan someone is connected to: dropped=%v, err=%v; want SQLSTATE 55006", racing.Dropped, racing.Err)
	}

	for _, dry := range []bool{true, false} {
		desc, found, err := PruneServer(ctx, url, dry)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(desc, "PostgreSQL 1") || strings.Contains(desc, "password") {
			t.Errorf("desc %q", desc)
		}
		got := map[string]LeftoverState{}
		for _, l := range found {
			got[l.Name] = l.State
			if l.Dropped != (l.State == Orphan && !dry) || l.Err != nil {
				t.Errorf("dryRun=%v: %s (state %d): dropped=%v err=%v", dry, l.Name, l.State, l.Dropped, l.Err)
			}
			if l.Bytes <= 0 {
				t.Errorf("%s: size %d", l.Name, l.Bytes)
			}
		}
		for n, st := range want {
			if g, ok := got[n]; !ok || g != st {
				t.Errorf("dryRun=%v: %s is %v (listed: %v), want %v", dry, n, g, ok, st)
			}
		}
		have := databases(t, admin)
		if dry {
			requirePresent(t, have, killed, "after a dry run")
		} else {
			requireAbsent(t, have, killed, "after prune")
			requirePresent(t, have, append(append(live.Names, unmarked...), busy.Names[0]), "after prune")
		}
	}

	_, _, err = PruneServer(ctx, "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2", false)
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("unreachable server: %v", err)
	}
}

// A run interrupted while CREATE DATABASE is on its way leaves nothing.
// pgx gives up on a cancelled context by closing the socket and sending a
// cancel request; when that request arrives after the commit (or never:
// through a proxy, a firewall, a pooler), the server finishes the CREATE
// for a client that has gone, and the database was left behind.
// CreateDatabase therefore waits for the CREATE and drops the database
// again. To hold the CREATE at the right moment, another session keeps
// pg_database locked against writes (CREATE DATABASE inserts its row)
// while the caller's context is cancelled, and the run reaches the server
// through a proxy that drops cancel requests.
func TestInterruptedCreateLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, _ := userServer(t)
	s, err := Start(ctx, Options{URL: cancelDroppingProxy(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.CreateDatabase(ctx, testTemplate, "first")
	if err != nil {
		t.Fatal(err)
	}
	// The blocker gets a connection of its own: on admin, its open
	// transaction would freeze what waitFor sees, for pg_stat_activity is
	// read once per transaction (the test then failed whenever the CREATE
	// below had not reached its lock by waitFor's first look).
	blockConn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer blockConn.Close(ctx)
	blocker, err := blockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not a lock on the template: CreateDatabase comments on it first
	// (pending.go), which would wait instead of the CREATE.
	if _, err := blocker.Exec(ctx, "LOCK TABLE pg_catalog.pg_database IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() {
		_, err := s.CreateDatabase(cctx, testTemplate, "interrupted")
		result <- err
	}()
	waitFor(t, admin, "the CREATE DATABASE to wait for the template's lock",
		"SELECT least(count(*), 1) FROM pg_stat_activity WHERE query LIKE 'CREATE DATABASE%' AND wait_event_type = 'Lock'", 1)
	// The CREATE waits for its lock (seen above) when its context ends;
	// the lock is let go at once. No pause is needed for a client that
	// gives up on its context to show: however the two race, the server
	// completes the CREATE, and only a CreateDatabase that waited for it
	// and dropped it leaves nothing.
	cancel()
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("CreateDatabase after its context was cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("CreateDatabase did not return within a minute of its context being cancelled")
	}
	waitFor(t, admin, "the CREATE DATABASE to finish on the server",
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE DATABASE%' AND state = 'active'", 0)
	for _, n := range databases(t, admin) {
		if strings.HasPrefix(n, s.owner.name("interrupted")) {
			t.Errorf("the interrupted run left %s", n)
		}
	}
	if err := first.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}

// cancelDroppingProxy forwards connections to the server at url and
// returns a URL that goes through it; it drops cancel requests (a 16-byte
// packet with code 80877102), as a network may.
func cancelDroppingProxy(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var first [8]byte
				if _, err := io.ReadFull(c, first[:]); err != nil {
					return
				}
				if binary.BigEndian.Uint32(first[:4]) == 16 && binary.BigEndian.Uint32(first[4:]) == 80877102 {
					return // a cancel request: lost
				}
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				s.Write(first[:])
				go func() { io.Copy(s, c); s.Close() }()
				io.Copy(c, s)
			}()
		}
	}()
	return strings.Replace(url, target, ln.Addr().String(), 1)
}

// waitFor polls query, a count, until it returns want, for at most 30 s.
// conn must not be in a transaction: pg_stat_activity would not change.
func waitFor(t *testing.T, conn *pgx.Conn, what, query string, want int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := conn.Query(context.Background(), "SELECT coalesce(datname, ''), state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 60) FROM pg_stat_activity WHERE backend_type = 'client backend'")
			var activity []string
			for rows.Next() {
				var a [5]string
				rows.Scan(&a[0], &a[1], &a[2], &a[3], &a[4])
				activity = append(activity, fmt.Sprint(a))
			}
			rows.Close()
			t.Fatalf("waited 30 s for %s; sessions: %v", what, activity)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// PruneCache deletes the clusters of the slots no running bank-sim holds,
// never one in use, and says how big each was; the next Start builds a new
// cluster in a freed slot.
func TestPruneCache(t *testing.T) {
	t.Parallel()
	dir := cacheDir(t)
	// Two clusters: one in use, one left by an ended run.
	inUse, _ := start(t, Options{CacheDir: dir})
	ended, _ := start(t, Options{CacheDir: dir})
	freed := ended.slotPath
	if err := ended.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		got, slots, err := PruneCache(dir, dry)
		if err != nil {
			t.Fatal(err)
		}
		if got != dir || len(slots) != 2 {
			t.Fatalf("dryRun=%v: %s %+v", dry, got, slots)
		}
		for _, s := range slots {
			switch s.Path {
			case inUse.slotPath:
				if !s.InUse || s.Removed || s.Err != nil {
					t.Errorf("dryRun=%v: the slot in use: %+v", dry, s)
				}
			case freed:
				if s.InUse || s.Removed == dry || s.Err != nil {
					t.Errorf("dryRun=%v: the free slot: %+v", dry, s)
				}
			default:
				t.Errorf("unexpected slot %s", s.Path)
			}
			// A cluster is tens of MB (62 MB measured).
			if s.Bytes < 20<<20 {
				t.Errorf("%s: %d bytes", s.Path, s.Bytes)
			}
		}
		if _, err := os.Stat(filepath.Join(freed, "data")); dry == errors.Is(err, os.ErrNotExist) {
			t.Errorf("dryRun=%v: the free slot's data: %v", dry, err)
		}
	}
	ping(t, inUse.adminURL)
	if _, err := os.Stat(filepath.Join(inUse.slotPath, "data", "PG_VERSION")); err != nil {
		t.Errorf("the slot in use lost its cluster: %v", err)
	}
	// The freed slot is taken by the next run and gets a new cluster.
	next, _ := start(t, Options{CacheDir: dir})
	if next.slotPath != freed || !strings.Contains(next.Describe(), "new cluster") {
		t.Errorf("next run: %s in %s", next.Describe(), next.slotPath)
	}
	ping(t, next.adminURL)

	if _, slots, err := PruneCache(filepath.Join(dir, "nothing-here"), false); err != nil || len(slots) != 0 {
		t.Errorf("a cache that does not exist: %v %v", slots, err)
	}
}

// invalidate marks a database the way PostgreSQL 15 does when a DROP
// DATABASE is interrupted part way (datconnlimit -2), and checks that
// ALTER DATABASE now refuses it, as it did in the run this test stands for.
func invalidate(t *testing.T, admin *pgx.Conn, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "UPDATE pg_database SET datconnlimit = -2 WHERE datname = $1", name); err != nil {
		t.Fatal(err)
	}
	// The refusal is FATAL: it ends the session, so it gets one of its own.
	probe, err := pgx.ConnectConfig(ctx, admin.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	_, err = probe.Exec(ctx, "ALTER DATABASE "+quote(name)+" IS_TEMPLATE false")
	if !isCode(err, "55000") {
		t.Fatalf("ALTER DATABASE on the invalidated %s: %v, want 55000 (cannot alter invalid database)", name, err)
	}
}

// A database left invalid by an interrupted DROP is dropped by the next
// run in the slot, which starts; it once made every later Start fail with
// "cannot alter invalid database".
func inSlotAnInterruptedDropIsFinishedInTheSlot(t *testing.T, dir string) {
	ctx := context.Background()
	s, _ := start(t, Options{CacheDir: dir})
	db, err := s.CreateDatabase(ctx, testTemplate, "half-dropped")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	invalidate(t, admin, db.Name)
	admin.Close(ctx)
	old := s.postPID
	s.proc.Signal(syscall.SIGKILL)
	<-s.done
	waitDead(t, old, deathBound)

	s2, _ := start(t, Options{CacheDir: dir})
	if s2.slotPath != s.slotPath {
		t.Fatalf("slot %s, want %s", s2.slotPath, s.slotPath)
	}
	if exists(t, s2, db.Name) {
		t.Fatalf("the invalid %s is still there", db.Name)
	}
	if !strings.Contains(s2.Describe(), "dropped 1 database left") {
		t.Errorf("Describe does not say what was dropped: %q", s2.Describe())
	}
}

// On a server bank-sim does not own, an invalid orphan is listed by prune
// and dropped by the next run, template or not; the run starts.
func TestAnInterruptedDropIsFinishedOnAServer(t *testing.T) {
	t.Parallel()
	url, admin, unmarked := userServer(t)
	killed := startExternalRun(t, url)
	killed.kill(t, admin)
	var plain string
	for _, n := range killed.Names {
		if !strings.Contains(n, "_tpl") {
			plain = n
			break
		}
	}
	if plain == "" {
		t.Fatalf("no scenario database among %v", killed.Names)
	}
	invalidate(t, admin, plain)

	_, found, err := PruneServer(context.Background(), url, true)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, l := range found {
		if l.Name == plain {
			listed = l.State == Orphan
		}
	}
	if !listed {
		t.Errorf("prune --dry-run does not list the invalid %s as an orphan: %+v", plain, found)
	}

	next, err := Start(context.Background(), Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	have := databases(t, admin)
	requireAbsent(t, have, killed.Names, "after the next run started")
	requirePresent(t, have, unmarked, "an unmarked database")
}
