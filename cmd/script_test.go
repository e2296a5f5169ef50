package cmd_test

import (
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
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
		Dir:           filepath.Join("..", "testdata", "script"),
		UpdateScripts: *update,
		Setup: func(env *testscript.Env) error {
			// Share the warm cluster cache with the user's own runs
			// instead of an initdb per script in $WORK.
			for _, k := range []string{"BANK_SIM_CACHE_DIR", "BANK_SIM_PG_BINARIES", "DATABASE_URL"} {
				if v := os.Getenv(k); v != "" {
					env.Setenv(k, v)
				}
			}
			if os.Getenv("BANK_SIM_CACHE_DIR") == "" && os.Geteuid() != 0 {
				if dir, err := os.UserCacheDir(); err == nil {
					env.Setenv("BANK_SIM_CACHE_DIR", filepath.Join(dir, "bank-sim"))
				}
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"scrub":    scrub,
			"httpstub": httpstub,
		},
	})
}

var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d+(\.\d+)?(ns|µs|ms|s)\b`), "<dur>"},
	{regexp.MustCompile(`(?m)^embedded PostgreSQL .*$|^PostgreSQL at .*$`), "<database>"},
	{regexp.MustCompile(`bank-sim \S+ · seed`), "bank-sim <version> · seed"},
}

// scrub SRC DST copies SRC to DST with times, ports and versions replaced by
// placeholders, so the rest can be compared byte for byte.
func scrub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: scrub SRC DST")
	}
	text := ts.ReadFile(args[0])
	for _, u := range unstable {
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
		ts.Fatalf("usage: httpstub hang|notfound|noid")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("%v", err)
	}
	var h http.Handler
	switch args[0] {
	case "hang":
		done := make(chan struct{})
		ts.Defer(func() { close(done) })
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
