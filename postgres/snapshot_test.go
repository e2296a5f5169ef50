package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/banksim/bank-sim/postgres/internal/snapshot"
)

// builtInSnapshot returns the snapshot this machine's binaries would use,
// skipping the test where none fits (another major version or architecture:
// those runs take the initdb path, which the other tests cover).
func builtInSnapshot(t *testing.T) []byte {
	t.Helper()
	bin, err := resolveBinaries(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("snapshots/pg%d-%s.tar.gz", bin.major, runtime.GOARCH)
	b, err := snapshots.ReadFile(name)
	if err != nil {
		t.Skipf("no built-in snapshot for PostgreSQL %d on %s", bin.major, runtime.GOARCH)
	}
	return b
}

// catalogShape is what a cluster's catalogs hold, table by table, in
// every database: a snapshot must give the same as initdb on the spot.
func catalogShape(t *testing.T, s *Server) string {
	t.Helper()
	ctx := context.Background()
	var out strings.Builder
	for _, db := range []string{"postgres", "template1"} {
		c, err := pgx.Connect(ctx, s.dbURL(db))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := c.Query(ctx, `
			SELECT c.relname, (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM pg_catalog.%I', c.relname), false, true, '')))[1]::text
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'pg_catalog' AND c.relkind = 'r'
			  AND c.relname NOT IN ('pg_statistic', 'pg_largeobject', 'pg_shdepend') -- grow with use
			ORDER BY 1`)
		if err != nil {
			c.Close(ctx)
			t.Fatal(err)
		}
		for rows.Next() {
			var rel, n string
			if err := rows.Scan(&rel, &n); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "%s.%s=%s\n", db, rel, n)
		}
		rows.Close()
		var dbs, roles string
		c.QueryRow(ctx, `SELECT string_agg(datname || ':' || pg_encoding_to_char(encoding) || ':' || datcollate, ',' ORDER BY datname) FROM pg_database`).Scan(&dbs)
		c.QueryRow(ctx, `SELECT string_agg(rolname || ':' || rolsuper, ',' ORDER BY rolname) FROM pg_roles`).Scan(&roles)
		fmt.Fprintf(&out, "%s databases=%s roles=%s\n", db, dbs, roles)
		c.Close(ctx)
	}
	return out.String()
}

func TestANewClusterComesFromTheSnapshot(t *testing.T) {
	t.Parallel()
	builtInSnapshot(t)
	dir := cacheDir(t)
	s, _ := start(t, Options{CacheDir: dir})
	if !strings.Contains(s.Describe(), "new cluster from bank-sim's built-in") {
		t.Fatalf("Describe = %q; want a new cluster from the built-in snapshot", s.Describe())
	}
	ping(t, s.adminURL)
	// The cluster's own password, not the snapshot's, is what logs in.
	wrong := strings.Replace(s.adminURL, ":"+passwordOf(t, s.adminURL)+"@", ":not-the-password@", 1)
	if c, err := pgx.Connect(context.Background(), wrong); err == nil {
		c.Close(context.Background())
		t.Fatal("a wrong password logged in to a cluster made from the snapshot")
	}
	shape := catalogShape(t, s)
	t.Logf("catalog shape: %d lines, e.g. %s", strings.Count(shape, "\n"), strings.SplitN(shape, "\n", 2)[0])
	s.Close()

	s2, _ := start(t, Options{CacheDir: dir})
	if !strings.Contains(s2.Describe(), "cluster reused") {
		t.Fatalf("second start: Describe = %q; want the unpacked cluster reused", s2.Describe())
	}
	s2.Close()
}

// A cluster from the snapshot has the catalog of one initdb makes: the same
// databases, roles, encodings, collations and relations. Exhaustive only: an
// initdb costs about 5 s of CPU here, and the snapshot changes only with
// mksnapshot or PostgreSQL's version.
func TestTheSnapshotMatchesInitdb(t *testing.T) {
	t.Parallel()
	exhaustive(t)
	builtInSnapshot(t)
	s, _ := start(t, Options{CacheDir: cacheDir(t)})
	if !strings.Contains(s.Describe(), "new cluster from bank-sim's built-in") {
		t.Fatalf("Describe = %q; want a new cluster from the built-in snapshot", s.Describe())
	}
	fromSnapshot := catalogShape(t, s)
	s.Close()

	s3, _ := start(t, Options{CacheDir: cacheDir(t), snapshot: snapshotOff})
	if strings.Contains(s3.Describe(), "from") || !strings.Contains(s3.Describe(), "new cluster") {
		t.Fatalf("with the snapshot off: Describe = %q; want a new cluster made by initdb", s3.Describe())
	}
	fromInitdb := catalogShape(t, s3)
	if fromSnapshot != fromInitdb {
		t.Errorf("a cluster from the snapshot differs from initdb's (remake it: go run ./postgres/internal/snapshot/mksnapshot):\n%s", lineDiff(fromInitdb, fromSnapshot))
	}
}

func passwordOf(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		t.Fatalf("no password in the admin URL: %v", err)
	}
	return cfg.Password
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			out = append(out, "initdb:   "+a, "snapshot: "+b)
		}
	}
	return strings.Join(out, "\n")
}

// tampered writes the built-in snapshot with change applied to its
// unpacked files, as an archive for Options.snapshot.
func tampered(t *testing.T, change func(dataDir string)) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	if err := snapshot.Unpack(bytes.NewReader(builtInSnapshot(t)), data); err != nil {
		t.Fatal(err)
	}
	change(data)
	var buf bytes.Buffer
	if err := snapshot.Pack(&buf, data); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cacheDir(t), "tampered.tar.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestASnapshotThatDoesNotFitFallsBackToInitdb(t *testing.T) {
	t.Parallel()
	exhaustive(t) // three initdbs
	builtInSnapshot(t)
	notAnArchive := filepath.Join(cacheDir(t), "garbage.tar.gz")
	os.WriteFile(notAnArchive, []byte("not gzip"), 0o644)
	cases := map[string]struct{ file, why string }{
		// Refused in single-user mode, before any server listens.
		"another major version": {tampered(t, func(d string) { os.WriteFile(filepath.Join(d, "PG_VERSION"), []byte("14\n"), 0o600) }),
			"not using the snapshot, running initdb"},
		// Accepted in single-user mode (no SSL there), refused by the
		// postmaster: the supervisor's second fallback.
		"refused by the postmaster": {tampered(t, func(d string) {
			f, _ := os.OpenFile(filepath.Join(d, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("\nssl = on\nssl_cert_file = 'no-such-cert.pem'\n")
			f.Close()
		}), "would not start the cluster unpacked from"},
		"not an archive": {notAnArchive, "not using the snapshot, running initdb"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			s, _ := start(t, Options{CacheDir: cacheDir(t), snapshot: c.file, Log: &log})
			if strings.Contains(s.Describe(), "from") || !strings.Contains(s.Describe(), "new cluster") {
				t.Fatalf("Describe = %q; want a new cluster made by initdb", s.Describe())
			}
			if !strings.Contains(log.String(), c.why) {
				t.Errorf("the log does not say %q:\n%s", c.why, log.String())
			}
			if strings.Contains(log.String(), passwordOf(t, s.adminURL)) {
				t.Error("the log shows the cluster's password")
			}
			ping(t, s.adminURL)
		})
	}
}

func TestBankSimSnapshotEnvironment(t *testing.T) {
	t.Setenv("BANK_SIM_SNAPSHOT", "yes please")
	_, err := Start(context.Background(), Options{CacheDir: cacheDir(t)})
	if err == nil || !strings.Contains(err.Error(), `only "off" is understood`) {
		t.Fatalf("BANK_SIM_SNAPSHOT=yes please: err = %v; want it refused, naming what is understood", err)
	}
	t.Setenv("BANK_SIM_SNAPSHOT", "off")
	s, _ := start(t, Options{CacheDir: cacheDir(t)})
	if strings.Contains(s.Describe(), "from") {
		t.Fatalf("BANK_SIM_SNAPSHOT=off: Describe = %q; want initdb's cluster", s.Describe())
	}
}

// exhaustive is pgtest.Exhaustive, which this package's tests cannot import
// (pgtest imports postgres): it skips t unless BANK_SIM_EXHAUSTIVE=1.
func exhaustive(t *testing.T) {
	t.Helper()
	if os.Getenv("BANK_SIM_EXHAUSTIVE") != "1" {
		t.Skip("exhaustive: set BANK_SIM_EXHAUSTIVE=1 to run")
	}
}
