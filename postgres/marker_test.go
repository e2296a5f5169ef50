package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// lookAlike is a database of the user's whose name bank-sim could have
// chosen, holding the user's rows.
type lookAlike struct {
	name string
	rows int
}

// plantLookAlike creates name on the server at url (as a template if
// template) with a table of rows rows and comment as its comment.
func plantLookAlike(t *testing.T, url string, admin *pgx.Conn, name string, rows int, template bool, comment string) lookAlike {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+quote(name)); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, withDBName(url, name))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount_kobo bigint NOT NULL);
		INSERT INTO orders SELECT g, 'customer ' || (g * 7 % 13), g * 1500 FROM generate_series(1, `+strconv.Itoa(rows)+`) g`)
	c.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "COMMENT ON DATABASE "+quote(name)+" IS "+quoteLiteral(comment)); err != nil {
		t.Fatal(err)
	}
	if template {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+quote(name)+" IS_TEMPLATE true"); err != nil {
			t.Fatal(err)
		}
	}
	return lookAlike{name, rows}
}

// requireIntact fails unless every look-alike is still there with all its
// rows.
func requireIntact(t *testing.T, url string, las []lookAlike, when string) {
	t.Helper()
	ctx := context.Background()
	for _, la := range las {
		c, err := pgx.Connect(ctx, withDBName(url, la.name))
		if err != nil {
			t.Errorf("%s: the user's %s: %v", when, la.name, err)
			continue
		}
		var n int
		err = c.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n)
		c.Close(ctx)
		if err != nil || n != la.rows {
			t.Errorf("%s: the user's %s has %d rows (%v), want %d", when, la.name, n, err, la.rows)
		}
	}
}

// commentOf is a database's comment.
func commentOf(t *testing.T, admin *pgx.Conn, name string) string {
	t.Helper()
	var c string
	if err := admin.QueryRow(context.Background(), "SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1", name).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 19: on the user's server, databases and a template whose names
// follow bank-sim's pattern exactly — one even with a killed run's owner
// key and that run's own comment, marker and all, copied onto it — hold
// the user's rows. A SIGKILLed run's leftovers are dropped by the next
// run's start-up sweep and by prune; the look-alikes are listed as not
// bank-sim's, survive every path with all their rows, and the one place
// that drops refuses them.
func TestLookAlikesOfBankSimsDatabasesAreNeverTouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, _ := userServer(t)
	killed := startExternalRun(t, url)
	stolen := commentOf(t, admin, killed.Names[0])
	if !strings.Contains(stolen, markerTag) {
		t.Fatalf("bank-sim's own database %s has no marker in its comment %q", killed.Names[0], stolen)
	}
	las := []lookAlike{
		plantLookAlike(t, url, admin, "bank_sim_0123456789abcdef_prod", 37, false, "production orders - do not drop"),
		plantLookAlike(t, url, admin, "bank_sim_"+killed.Owner+"_mine", 11, false, stolen),
		plantLookAlike(t, url, admin, "bank_sim_0123456789abcdef_tpl_5e0c2d4e8a1b", 23, true, "our own template - do not drop"),
	}
	killed.kill(t, admin)

	_, found, err := PruneServer(ctx, url, true)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]LeftoverState{}
	for _, l := range found {
		states[l.Name] = l.State
	}
	for _, la := range las {
		if st, ok := states[la.name]; !ok || st != Unmarked {
			t.Errorf("prune --dry-run lists the user's %s as %v (listed: %v), want Unmarked", la.name, st, ok)
		}
	}
	for _, n := range killed.Names {
		if states[n] != Orphan {
			t.Errorf("prune --dry-run lists the killed run's %s as %v, want Orphan", n, states[n])
		}
	}

	next, err := Start(ctx, Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(next.Describe(), "dropped 3 databases left by killed bank-sim runs") {
		t.Errorf("the start-up sweep says %q; want the killed run's 3 databases dropped, and no more", next.Describe())
	}
	requireAbsent(t, databases(t, admin), killed.Names, "after the next run's start-up sweep")
	requireIntact(t, url, las, "after the next run's start-up sweep")
	if _, err := next.CreateDatabase(ctx, testTemplate, "a run"); err != nil {
		t.Fatal(err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := PruneServer(ctx, url, false); err != nil {
		t.Fatal(err)
	}
	requireIntact(t, url, las, "after a run's Close and prune")

	for _, la := range las {
		if err := dropOurs(ctx, admin, la.name, true); !errors.Is(err, errNotOurs) {
			t.Errorf("dropOurs(%s) = %v, want errNotOurs", la.name, err)
		}
	}
	requireIntact(t, url, las, "after dropOurs")
	if have := databases(t, admin); len(have) != 2+len(las) {
		t.Errorf("left on the server: %v; want the look-alikes and userServer's two", have)
	}
}

// The same in an embedded cluster: a look-alike of its shared template
// under the exact name is neither cloned from nor dropped (bank-sim builds
// its own beside it), a look-alike kept database is not taken, and after a
// SIGKILLed run the next start in the slot drops the run's database but no
// look-alike.
func TestLookAlikesInTheEmbeddedClusterAreNeverTouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := cacheDir(t)
	s, _ := start(t, Options{CacheDir: dir})
	admin, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tplName := sharedTemplatePrefix + ident(testTemplate.Version, 32)
	las := []lookAlike{
		plantLookAlike(t, s.adminURL, admin, tplName, 19, true, "a template of mine"),
		plantLookAlike(t, s.adminURL, admin, keptPrefixOf(testTemplate.Version)+"00000000", 29, false, "kept by me"),
		plantLookAlike(t, s.adminURL, admin, "bank_sim_0123456789abcdef_prod", 37, false, "production orders - do not drop"),
	}
	if db, err := s.TakeKept(ctx, testTemplate, "taken"); err != nil || db != nil {
		t.Fatalf("TakeKept took the user's look-alike: %+v, %v", db, err)
	}
	db, err := s.CreateDatabase(ctx, testTemplate, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = c.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n)
	c.Close(ctx)
	if err != nil || n != 100 {
		t.Fatalf("the clone has %d accounts (%v): it was not cloned from bank-sim's own template", n, err)
	}

	old := s.postPID
	s.proc.Signal(syscall.SIGKILL)
	<-s.done
	waitDead(t, old, deathBound)
	s2, _ := start(t, Options{CacheDir: dir})
	if s2.slotPath != s.slotPath {
		t.Fatalf("slot %s, want %s", s2.slotPath, s.slotPath)
	}
	if exists(t, s2, db.Name) {
		t.Errorf("the killed run's %s is still there", db.Name)
	}
	if !strings.Contains(s2.Describe(), "dropped 1 database left") {
		t.Errorf("the start-up sweep says %q; want the killed run's one database dropped", s2.Describe())
	}
	requireIntact(t, s2.adminURL, las, "after the next start in the slot")
	if db, err := s2.TakeKept(ctx, testTemplate, "taken"); err != nil || db != nil {
		t.Fatalf("TakeKept took the user's look-alike: %+v, %v", db, err)
	}
}
