// Package scripts_test runs the CLI's golden scripts
// (testdata/script/*.txtar) through bank-sim's real entry point. It is apart
// from cmd's other tests so that each gets a test binary, and so Go's default
// ten-minute timeout, of its own, and go test ./... runs the two side by
// side: together they used ~137 CPU-s, the most of any package, and beside
// another test run (load 12-18) they took 526 s of their 600.
package scripts_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"
)

var update = flag.Bool("u", false, "rewrite the golden output in testdata/script/*.txtar")

func TestMain(m *testing.M) {
	// The test binary doubles as the PostgreSQL supervisor and as the
	// bank-sim command that the scripts run.
	postgres.MaybeSupervise()
	os.Exit(testscript.RunMain(m, map[string]func() int{"bank-sim": cmd.Main}))
}

// TestScripts pins the CLI's visible behaviour: output, errors and exit
// status, through the real binary entry point and a real PostgreSQL.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           filepath.Join("..", "..", "testdata", "script"),
		UpdateScripts: *update,
		Setup: func(env *testscript.Env) error {
			// Share the warm cluster cache with the user's own runs
			// instead of an initdb per script in $WORK.
			for _, k := range []string{"BANK_SIM_CACHE_DIR", "BANK_SIM_PG_BINARIES", "DATABASE_URL"} {
				if v := os.Getenv(k); v != "" {
					env.Setenv(k, v)
				}
			}
			// The directory of the scripts' bank-sim, for a PATH with
			// nothing else on it ($BANK_SIM_BIN_DIR).
			for _, d := range filepath.SplitList(env.Getenv("PATH")) {
				if _, err := os.Stat(filepath.Join(d, "bank-sim")); err == nil {
					env.Setenv("BANK_SIM_BIN_DIR", d)
					break
				}
			}
			if os.Getenv("BANK_SIM_CACHE_DIR") == "" && os.Geteuid() != 0 {
				if dir, err := os.UserCacheDir(); err == nil {
					env.Setenv("BANK_SIM_CACHE_DIR", filepath.Join(dir, "bank-sim"))
				}
			}
			return nil
		},
		// [pgbench]: PostgreSQL's pgbench is installed beside its server,
		// where bench --vs-pgbench looks for it.
		// [exhaustive]: BANK_SIM_EXHAUSTIVE=1 (pgtest.Exhaustive); a
		// script's long tail follows "[!exhaustive] stop".
		// [root]: running as root (network namespaces need it).
		Condition: func(cond string) (bool, error) {
			if cond == "exhaustive" {
				return pgtest.IsExhaustive(), nil
			}
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			if cond != "pgbench" {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
			if d := os.Getenv("BANK_SIM_PG_BINARIES"); d != "" {
				dirs = append(dirs, filepath.Join(d, "bin"))
			}
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(d, "pgbench")); err == nil {
					return true, nil
				}
			}
			return false, nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"scrub":        scrub,
			"postgres-url": postgresURL(t),
			"sql":          sqlCmd,
			"wait-sql":     waitSQL,
			"hold-slot":    holdSlot,
			"mkfile":       mkfile,
			"httpstub":     httpstub,
			"filesize":     filesize,
			"netns-gone":   netnsGone,
		},
	})
}

// postgresURL VAR sets VAR to the connection string of a PostgreSQL server
// that stands in for the user's own: an embedded one in a cache of its own
// (not the one the scripts' runs share), started on first use and stopped
// when TestScripts ends. The cache outlives the test, so its cluster is
// warm (a new one costs an unpack and cold first databases, seconds of
// prune.txtar's); what an earlier, failed run left in it is dropped first,
// so it holds only what the scripts make.
func postgresURL(t *testing.T) func(ts *testscript.TestScript, neg bool, args []string) {
	var once sync.Once
	var srv *postgres.Server
	var err error
	t.Cleanup(func() {
		if srv != nil {
			srv.Close()
		}
	})
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: postgres-url VAR")
		}
		once.Do(func() {
			// Not t.TempDir, and searchable by all: as root the
			// supervisor runs as nobody, who must be able to enter it.
			dir := filepath.Join(os.TempDir(), "bank-sim-script-pg")
			if err = os.MkdirAll(dir, 0o755); err != nil {
				return
			}
			os.Chmod(dir, 0o755)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if srv, err = postgres.Start(ctx, postgres.Options{CacheDir: dir}); err != nil {
				return
			}
			err = dropAllDatabases(ctx, srv.AdminURL())
		})
		ts.Check(err)
		ts.Setenv(args[0], srv.AdminURL())
	}
}

// dropAllDatabases empties a cluster of the scripts' own, but for
// PostgreSQL's own databases.
func dropAllDatabases(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname NOT IN ('postgres', 'template0', 'template1') AND datname <> current_database()")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("emptying the scripts' server: %w", err)
		}
	}
	return nil
}

// sql URL QUERY runs one statement.
func sqlCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: sql URL QUERY")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, args[0])
	ts.Check(err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, args[1])
	if neg != (err != nil) {
		ts.Fatalf("sql %q: %v", args[1], err)
	}
}

// wait-sql URL QUERY WANT polls QUERY, which returns one value, until it
// prints as WANT, for at most a minute.
func waitSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: wait-sql URL QUERY WANT")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, args[0])
	ts.Check(err)
	defer conn.Close(context.Background())
	var got string
	for ctx.Err() == nil {
		var v any
		if err := conn.QueryRow(ctx, args[1]).Scan(&v); err == nil {
			if got = fmt.Sprint(v); got == args[2] {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("waited a minute for %q to be %s; last %s", args[1], args[2], got)
}

// hold-slot DIR takes the lock of a cluster slot, as a running bank-sim's
// supervisor does, until the script ends.
func holdSlot(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: hold-slot DIR")
	}
	f, err := os.OpenFile(filepath.Join(ts.MkAbs(args[0]), "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	ts.Check(err)
	ts.Check(syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	ts.Defer(func() { f.Close() })
}

// mkfile PATH BYTES writes a file of that size.
func mkfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mkfile PATH BYTES")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	path := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Dir(path), 0o755))
	ts.Check(os.WriteFile(path, make([]byte, n), 0o644))
}

// filesize PATH MIN MAX checks that a file's size is within bounds: a
// report that is there but empty, or bloated, is caught.
func filesize(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: filesize PATH MIN MAX")
	}
	st, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	lo, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	hi, err := strconv.ParseInt(args[2], 10, 64)
	ts.Check(err)
	if st.Size() < lo || st.Size() > hi {
		ts.Fatalf("%s is %d bytes, want %d to %d", args[0], st.Size(), lo, hi)
	}
}

// netns-gone checks that the partitioned run whose report is the last
// stdout (its "network: … (banksim-<id>-app1…)" line) left nothing: no
// namespace, no link, no state file.
func netnsGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: netns-gone")
	}
	m := regexp.MustCompile(`banksim-([0-9a-f]{6})-app1`).FindStringSubmatch(ts.ReadFile("stdout"))
	if m == nil {
		ts.Fatalf("no partitioned run's network named in stdout")
	}
	id := m[1]
	left, _ := filepath.Glob("/run/netns/banksim-" + id + "-*")
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if strings.HasPrefix(ifc.Name, "bs"+id+"-") {
			left = append(left, "link "+ifc.Name)
		}
	}
	cache, err := postgres.CacheDir(ts.Getenv("BANK_SIM_CACHE_DIR"))
	ts.Check(err)
	state := filepath.Join(cache, "netns", id+".json")
	if _, err := os.Stat(state); err == nil {
		left = append(left, state)
	}
	if len(left) > 0 {
		ts.Fatalf("run %s left %v", id, left)
	}
}

// timeColumn marks a replacement that keeps the text's width, so that a
// diagram's columns still line up in the golden file.
const timeColumn = "\x00time"

var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d+(\.\d+)?(ns|µs|ms|s)\b`), "<dur>"},
	// Real time, rounded for people: a run's "(1.2 s)" and "in 0.8 s", and
	// the time column of a --timeline (the simulated "+31 s" stays).
	// A loaded machine's minutes too: "(1 min 35 s)".
	{regexp.MustCompile(`\(\d+(\.\d+)? (ms|s|min)( \d+ s)?\)`), "(<dur>)"},
	{regexp.MustCompile(`(?m)\bin \d+(\.\d+)? (ms|s|min)( \d+ s)?$`), "in <dur>"},
	{regexp.MustCompile(`(?m)^\d+(\.\d+)? (ms|s) +`), timeColumn},
	{regexp.MustCompile(`(?m)^embedded PostgreSQL .*$|^PostgreSQL at .*$`), "<database>"},
	{regexp.MustCompile(`bank-sim \S+ · (seed|recipe)`), "bank-sim <version> · $1"},
	{regexp.MustCompile(`bank-sim \S+, seed`), "bank-sim <version>, seed"},
	{regexp.MustCompile(`(?m)^PostgreSQL \S+ at \S+`), "PostgreSQL <version> at <host:port>"},
	// Database names carry a random owner key and id (postgres/owner.go).
	{regexp.MustCompile(`bank_sim_[0-9a-f]{16}_tpl_\w+`), "bank_sim_<key>_tpl_<schema version>"},
	{regexp.MustCompile(`bank_sim_[0-9a-f]{16}_(\w+?)_[0-9a-f]{8}\b`), "bank_sim_<key>_${1}_<id>"},
	// bench's measured columns (a row's rate, deadlocks and errors stay):
	// with pgbench's rate and the ratio, then without them.
	{regexp.MustCompile(`(?m)^(\S.*?) {2,}\d+ +<dur> +<dur> +(\d+) +(\d+) +\d+ +\d+\.\d+×$`), "$1  <ops/s> <dur> <dur> $2 $3 <pgbench/s> <ratio>"},
	{regexp.MustCompile(`(?m)^(\S.*?) {2,}\d+ +<dur> +<dur> +(\d+) +(\d+)$`), "$1  <ops/s> <dur> <dur> $2 $3"},
	// Database sizes vary by a few kB, and so the padding after them.
	{regexp.MustCompile(`\d+(\.\d)? (B|KiB|MiB|GiB) +`), "<size> "},
	{regexp.MustCompile(`\d+(\.\d)? (B|KiB|MiB|GiB)\b`), "<size>"},
}

// scrub SRC DST copies SRC to DST with times, ports and versions replaced by
// placeholders, so the rest can be compared byte for byte.
func scrub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: scrub SRC DST")
	}
	text := ts.ReadFile(args[0])
	for _, u := range unstable {
		if u.with == timeColumn {
			text = u.re.ReplaceAllStringFunc(text, func(m string) string {
				return "<t>" + strings.Repeat(" ", max(len(m)-3, 1))
			})
			continue
		}
		text = u.re.ReplaceAllString(text, u.with)
	}
	if err := os.WriteFile(ts.MkAbs(args[1]), []byte(text), 0o644); err != nil {
		ts.Fatalf("%v", err)
	}
}

// httpstub KIND starts a server on 127.0.0.1 that does not speak the
// transfer contract, for the duration of the script, and sets $STUB to its
// URL. KIND is hang (accepts, reads, never answers), notfound (404 to
// everything, as a server without the route) or noid (201 without a
// transfer id).
func httpstub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpstub hang|notfound|noid|html|closepost|closer")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("%v", err)
	}
	if args[0] == "closer" {
		// Not HTTP: reads what it is sent and closes without a byte, as a
		// PostgreSQL port does with an HTTP request.
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					_, _ = c.Read(make([]byte, 512))
					_ = c.Close()
				}()
			}
		}()
		ts.Defer(func() { _ = ln.Close() })
		ts.Setenv("STUB", "http://"+ln.Addr().String())
		return
	}
	var h http.Handler
	switch args[0] {
	case "html":
		// A web site, not an API: a page for every request.
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			if r.Method != "GET" {
				w.WriteHeader(404)
			}
			_, _ = io.WriteString(w, "<!DOCTYPE html>\n<html>\n<head>\n<title>Not here</title>\n</head>\n<body>\n"+strings.Repeat("<p>a long page</p>\n", 50)+"</body>\n</html>\n")
		})
	case "closepost":
		// An HTTP server that hangs up on every POST, at once. It reads
		// the request first: a socket closed with bytes of it still unread
		// sends a reset, not an end of stream, and on a loaded machine the
		// body can come in a segment of its own, after the headers were
		// read ("connection reset" instead of "closed without an answer",
		// seen once in CI).
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" {
				_, _ = io.Copy(io.Discard, r.Body)
				c, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = c.Close()
				}
				return
			}
			w.WriteHeader(404)
		})
	case "hang":
		done := make(chan struct{})
		ts.Defer(func() { close(done) })
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "GET" {
				w.WriteHeader(404) // an HTTP server; its transfers hang
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-done:
			case <-r.Context().Done():
			}
		})
	case "notfound":
		h = http.NotFoundHandler()
	case "noid":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			_, _ = io.WriteString(w, `{"ok":true}`)
		})
	default:
		ts.Fatalf("httpstub: unknown kind %q", args[0])
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	ts.Defer(func() { _ = srv.Close() })
	ts.Setenv("STUB", "http://"+ln.Addr().String())
}
