package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	MaybeSupervise()
	if url := os.Getenv("BANK_SIM_TEST_EXTERNAL"); url != "" {
		os.Exit(fakeExternalRun(url))
	}
	if dir := os.Getenv("BANK_SIM_TEST_PARENT"); dir != "" {
		os.Exit(fakeParent(dir))
	}
	// The records of pendfile.go go to a directory of the tests' own, not
	// the user's cache.
	pending, err := os.MkdirTemp("", "bank-sim-pending-test-")
	if err != nil {
		panic(err)
	}
	pendingDir = func() string { return pending }
	code := m.Run()
	os.RemoveAll(pending)
	if warm.dir != "" {
		os.RemoveAll(warm.dir)
	}
	os.Exit(code)
}

// warm is a cache dir shared by the tests that do not care whether their
// cluster is new: after the first, they start in a tenth of a second
// instead of paying for initdb.
var warm struct {
	once sync.Once
	dir  string
	err  error
}

func warmCache(t testing.TB) string {
	warm.once.Do(func() {
		warm.dir, warm.err = os.MkdirTemp("", "bank-sim-pg-test-warm-")
		if warm.err == nil {
			warm.err = os.Chmod(warm.dir, 0o755)
		}
	})
	if warm.err != nil {
		t.Fatal(warm.err)
	}
	return warm.dir
}

// cacheDir returns a fresh cache dir that nobody can reach (t.TempDir is
// 0700 root, which the dropped supervisor could not enter).
func cacheDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "bank-sim-pg-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func start(t *testing.T, o Options) (*Server, time.Duration) {
	t.Helper()
	t0 := time.Now()
	s, err := Start(context.Background(), o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	d := time.Since(t0)
	t.Cleanup(func() { s.Close() })
	t.Logf("%s (start %v)", s.Describe(), d.Round(time.Millisecond))
	return s, d
}

func waitDead(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still running after %v", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ping(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT 1: %v %d", err, n)
	}
}

var testTemplate = Template{
	Version: "test-v1",
	Init: func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `
			CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
			INSERT INTO accounts SELECT g, 'owner ' || g, 1000 FROM generate_series(1, 100) g;`)
		return err
	},
}

func TestStartStopReuse(t *testing.T) {
	t.Parallel()
	dir := cacheDir(t)
	s, cold := start(t, Options{CacheDir: dir})
	if !s.Embedded() || !strings.Contains(s.Describe(), "new cluster") {
		t.Fatalf("Describe = %q", s.Describe())
	}
	if strings.Contains(s.Describe(), s.adminURL[strings.Index(s.adminURL, ":")+3:strings.Index(s.adminURL, "@")]) {
		t.Fatalf("Describe leaks credentials: %q", s.Describe())
	}
	pid := s.postPID
	if pid == 0 || !isPostmasterOf(pid, s.dataDir) {
		t.Fatalf("no postmaster %d on %s", pid, s.dataDir)
	}
	ping(t, s.adminURL)
	t0 := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closeTime := time.Since(t0)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if alive(pid) {
		t.Fatalf("postmaster %d survived Close", pid)
	}
	if readPidFile(s.dataDir) != 0 {
		t.Fatal("postmaster.pid left behind")
	}
	if m, _ := filepath.Glob(filepath.Join(s.slotPath, "tmp", "*")); len(m) > 0 {
		t.Fatalf("temp files left: %v", m)
	}
	if m, _ := filepath.Glob("/tmp/embedded_postgres_log*"); len(m) > 0 {
		t.Logf("note: /tmp has embedded_postgres_log files (maybe from other runs): %d", len(m))
	}

	var warm []time.Duration
	for i := 0; i < 3; i++ {
		s2, d := start(t, Options{CacheDir: dir})
		if !strings.Contains(s2.Describe(), "cluster reused") || s2.dataDir != s.dataDir {
			t.Fatalf("not reused: %q", s2.Describe())
		}
		ping(t, s2.adminURL)
		t0 := time.Now()
		s2.Close()
		closeTime = max(closeTime, time.Since(t0))
		warm = append(warm, d)
	}
	t.Logf("TIMING cold start %v, warm starts %v, close (max) %v", cold.Round(time.Millisecond), warm, closeTime.Round(time.Millisecond))
}

// The embedded server trades durability against OS crashes for speed
// (supervisor.go says why), but never an acknowledged commit when postgres
// itself is killed: synchronous_commit stays on.
func TestTheEmbeddedServerSkipsDurabilityASimulatorDoesNotNeed(t *testing.T) {
	t.Parallel()
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for name, want := range map[string]string{"fsync": "off", "full_page_writes": "off", "wal_init_zero": "off", "synchronous_commit": "on"} {
		var got string
		if err := c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %s; want %s", name, got, want)
		}
	}
}

func TestTwoServersAtOnce(t *testing.T) {
	t.Parallel()
	dir := warmCache(t)
	var wg sync.WaitGroup
	servers := make([]*Server, 2)
	errs := make([]error, 2)
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = Start(context.Background(), Options{CacheDir: dir})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		defer servers[i].Close()
	}
	if servers[0].slotPath == servers[1].slotPath {
		t.Fatalf("both in %s", servers[0].slotPath)
	}
	for _, s := range servers {
		t.Log(s.Describe())
		ping(t, s.adminURL)
		db, err := s.CreateDatabase(context.Background(), testTemplate, "two")
		if err != nil {
			t.Fatal(err)
		}
		ping(t, db.URL)
	}
	for _, s := range servers {
		pid := s.postPID
		s.Close()
		waitDead(t, pid, time.Second)
	}
}

func TestCreateDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	t0 := time.Now()
	db, err := s.CreateDatabase(ctx, testTemplate, "First Scenario!")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING first CreateDatabase (builds template) %v", time.Since(t0).Round(time.Millisecond))
	// Marked with this process's owner key, then the label.
	if key, ok := ownerOf(db.Name); !ok || key != s.owner.key || !strings.HasPrefix(db.Name, s.owner.name("first_scenario__")) {
		t.Fatalf("name %q does not carry owner %s and the label", db.Name, s.owner.hex)
	}
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var n, sum int64
	if err := c.QueryRow(ctx, "SELECT count(*), sum(balance) FROM accounts").Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 100 || sum != 100000 {
		t.Fatalf("clone has %d rows, sum %d", n, sum)
	}
	// Writes to a clone must not reach the template or other clones.
	if _, err := c.Exec(ctx, "UPDATE accounts SET balance = 0"); err != nil {
		t.Fatal(err)
	}
	db2, err := s.CreateDatabase(ctx, testTemplate, "second")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pgx.Connect(ctx, db2.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.QueryRow(ctx, "SELECT sum(balance) FROM accounts").Scan(&sum); err != nil || sum != 100000 {
		t.Fatalf("second clone sum %d, %v", sum, err)
	}
	c2.Close(ctx)

	// Drop works with a session still connected (c).
	if err := db.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if exists(t, s, db.Name) {
		t.Fatal("dropped database still exists")
	}
	if err := db.Drop(ctx); err != nil {
		t.Fatalf("second Drop: %v", err)
	}

	// Concurrent clones (parallel tests).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.CreateDatabase(ctx, testTemplate, "par")
			if err == nil {
				err = d.Drop(ctx)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkClone measures a clone and its drop with each CREATE DATABASE
// strategy, the figures behind cloneStrategy's choice. A benchmark, not a
// test: 40 clones and drops cost the default suite 10 CPU-s and caught
// nothing that the clones of TestCreateDatabase do not.
func BenchmarkClone(b *testing.B) {
	ctx := context.Background()
	s, err := Start(ctx, Options{CacheDir: warmCache(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	defer func(old string) { cloneStrategy = old }(cloneStrategy)
	for _, strat := range []string{"FILE_COPY", "WAL_LOG"} {
		b.Run(strat, func(b *testing.B) {
			cloneStrategy = strat
			// The template is built outside the timing.
			if d, err := s.CreateDatabase(ctx, testTemplate, "warm"); err != nil || d.Drop(ctx) != nil {
				b.Fatal(err)
			}
			var drops time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := s.CreateDatabase(ctx, testTemplate, "bench")
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := d.Drop(ctx); err != nil {
					b.Fatal(err)
				}
				drops += time.Since(t0)
			}
			b.ReportMetric(float64(drops.Microseconds())/1000/float64(b.N), "drop-ms/op")
		})
	}
}

func exists(t *testing.T, s *Server, name string) bool {
	t.Helper()
	ctx := context.Background()
	c, err := s.admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release(c, nil)
	var ok bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname=$1)", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestTemplateInitErrorLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The warm cache: the slot is this server's alone while it runs, so
	// what a failed Init leaves shows as a change in the count, and no
	// snapshot is unpacked for it.
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	count := func() int {
		c, err := s.admin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.release(c, nil)
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE 'bank_sim%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	bad := Template{Version: "bad", Init: func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "CREATE TABLE x (")
		return err
	}}
	if _, err := s.CreateDatabase(ctx, bad, "x"); err == nil {
		t.Fatal("want error")
	}
	if n := count(); n != before {
		t.Fatalf("%d bank_sim databases after a failed Init, %d before", n, before)
	}
}

// TestSecondStartInTheSameSlot runs the tests whose second Start must
// find the slot of the first, one after the other on a cache of their own:
// in the shared warm cache a parallel test could take the slot between the
// two starts, and a cache each would unpack the snapshot each time (about a
// CPU-second). Serial top-level tests instead kept a core idle for 8 s.
func TestSecondStartInTheSameSlot(t *testing.T) {
	t.Parallel()
	dir := cacheDir(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, string)
	}{
		{"LeftoversOfAKilledRun", inSlotLeftoversOfAKilledRunInTheSlot},
		{"DetachedPostmasterOfAnOlderBankSim", inSlotDetachedPostmasterOfAnOlderBankSim},
		{"AnInterruptedDropIsFinished", inSlotAnInterruptedDropIsFinishedInTheSlot},
		{"KeptDatabaseIsTakenByTheNextRun", inSlotKeptDatabaseIsTakenByTheNextRun},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, dir) })
	}
}

// A run whose supervisor is SIGKILLed takes its server with it; the next
// Start in that slot reuses the cluster, drops the killed run's scenario
// databases and keeps its template.
func inSlotLeftoversOfAKilledRunInTheSlot(t *testing.T, dir string) {
	ctx := context.Background()
	s, _ := start(t, Options{CacheDir: dir})
	db, err := s.CreateDatabase(ctx, testTemplate, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	old := s.postPID
	s.proc.Signal(syscall.SIGKILL)
	<-s.done
	waitDead(t, old, deathBound)
	s2, d := start(t, Options{CacheDir: dir})
	t.Logf("TIMING start after a killed run %v", d.Round(time.Millisecond))
	if s2.slotPath != s.slotPath {
		t.Fatalf("slot %s, want %s", s2.slotPath, s.slotPath)
	}
	if exists(t, s2, db.Name) {
		t.Fatal("leftover scenario database not dropped")
	}
	if !exists(t, s2, "bank_sim_tpl_test_v1") {
		t.Fatal("template not kept")
	}
	t0 := time.Now()
	if _, err := s2.CreateDatabase(ctx, testTemplate, "after"); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING CreateDatabase with kept template %v", time.Since(t0).Round(time.Millisecond))
}

// An older bank-sim started its server through pg_ctl, which detaches it,
// so a killed run could leave one running in a slot. The next Start that
// takes the slot stops it and starts its own on the same cluster.
func inSlotDetachedPostmasterOfAnOlderBankSim(t *testing.T, dir string) {
	s, _ := start(t, Options{CacheDir: dir})
	data, slot := s.dataDir, s.slotPath
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	old, port := startDetachedPostmaster(t, data)
	if !isPostmasterOf(old, data) {
		t.Fatalf("pid %d on %s is not proven its postmaster", old, data)
	}

	s2, _ := start(t, Options{CacheDir: dir})
	if s2.slotPath != slot {
		t.Fatalf("slot %s, want %s", s2.slotPath, slot)
	}
	waitDead(t, old, time.Second)
	if accepts(port) {
		t.Fatalf("the detached server still accepts connections on %d", port)
	}
	ping(t, s2.adminURL)
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{BinariesPath: "/nonexistent", CacheDir: cacheDir(t)})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "bin/pg_ctl") {
		t.Fatalf("err = %v", err)
	}
	_, err = Start(context.Background(), Options{URL: "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2"})
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	// Unreachable cache dir (0700 root parent): nobody cannot enter it.
	if os.Geteuid() == 0 {
		_, err = Start(context.Background(), Options{CacheDir: filepath.Join(t.TempDir(), "c")})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "BANK_SIM_CACHE_DIR") {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
	}
}

func TestExternal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	emb, _ := start(t, Options{CacheDir: warmCache(t)})
	pc, err := pgx.ParseConfig(emb.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=disable", pc.Port, pc.Password)
	for _, url := range []string{emb.adminURL, kv} {
		ext, err := Start(ctx, Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(ext.Describe())
		if ext.Embedded() || strings.Contains(ext.Describe(), "password") {
			t.Fatalf("Describe %q", ext.Describe())
		}
		db, err := ext.CreateDatabase(ctx, testTemplate, "ext")
		if err != nil {
			t.Fatal(err)
		}
		ping(t, db.URL)
		var tpl string
		for _, e := range ext.tpls {
			tpl = e.name
		}
		if err := db.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ext.Close(); err != nil {
			t.Fatal(err)
		}
		if exists(t, emb, tpl) {
			t.Fatalf("template %s left after Close", tpl)
		}
	}
}

// Crash kills the postmaster with SIGKILL and restarts it on the same data
// and port: a row committed before the crash is there after it, a
// transaction still open at the crash is not, and Close still leaves no
// postmaster behind.
func TestCrashKeepsCommittedData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := start(t, Options{CacheDir: warmCache(t)})
	db, err := s.CreateDatabase(ctx, testTemplate, "crash")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE accounts SET balance = 4242 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	// Open when the server dies: never committed.
	open, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "UPDATE accounts SET balance = 0 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	old := s.postPID
	oldURL := s.adminURL
	t0 := time.Now()
	if err := s.Crash(ctx); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	t.Logf("TIMING crash and restart %v", time.Since(t0).Round(time.Millisecond))
	if alive(old) {
		t.Fatalf("postmaster %d survived the crash", old)
	}
	if s.postPID == 0 || s.postPID == old || !isPostmasterOf(s.postPID, s.dataDir) {
		t.Fatalf("no new postmaster on %s (old %d, new %d)", s.dataDir, old, s.postPID)
	}
	if s.adminURL != oldURL {
		t.Fatal("the server moved")
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection from before the crash still works")
	}
	c.Close(ctx)

	c2, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("connect after the crash: %v", err)
	}
	defer c2.Close(ctx)
	var b1, b2 int64
	if err := c2.QueryRow(ctx, "SELECT (SELECT balance FROM accounts WHERE id = 1), (SELECT balance FROM accounts WHERE id = 2)").Scan(&b1, &b2); err != nil {
		t.Fatal(err)
	}
	if b1 != 4242 || b2 != 1000 {
		t.Fatalf("after the crash: balances %d and %d, want 4242 (committed) and 1000 (never committed)", b1, b2)
	}
	// The admin side works again too.
	if _, err := s.CreateDatabase(ctx, testTemplate, "after-crash"); err != nil {
		t.Fatalf("CreateDatabase after the crash: %v", err)
	}
	// A second crash works as the first.
	if err := s.Crash(ctx); err != nil {
		t.Fatalf("second Crash: %v", err)
	}
	ping(t, s.adminURL)

	pid := s.postPID
	c2.Close(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("postmaster %d survived Close after a crash", pid)
	}
	if readPidFile(s.dataDir) != 0 {
		t.Fatal("postmaster.pid left behind")
	}
}

func TestCrashRefusesAnExternalServer(t *testing.T) {
	t.Parallel()
	s := &Server{}
	if err := s.Crash(context.Background()); !errors.Is(err, ErrNotEmbedded) {
		t.Fatalf("Crash on an external server: %v, want ErrNotEmbedded", err)
	}
}
