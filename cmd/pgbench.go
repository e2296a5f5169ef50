package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgbench is PostgreSQL's own benchmark client, the yardstick of
// `bench --vs-pgbench`: a C program that sends a script's statements one at
// a time, each as a prepared statement (-M prepared, its fastest mode), over
// as many connections as there are clients.
type pgbench struct {
	path string
}

// findPgbench looks for pgbench where the server's own binaries are:
// --pgbench, then $BANK_SIM_PG_BINARIES/bin, then the server's BINDIR (as
// the server reports it, when it lets us read pg_config), then
// /usr/lib/postgresql/<the server's major version>/bin, then $PATH. It
// returns every place it looked when it finds none.
func findPgbench(ctx context.Context, app *App, explicit, adminURL string) (*pgbench, error) {
	if explicit != "" {
		return &pgbench{path: explicit}, nil // checked with the other flags
	}
	var dirs []string
	if d := app.Env.Getenv("BANK_SIM_PG_BINARIES"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if conn, err := pgx.Connect(ctx, adminURL); err == nil {
		var bindir string
		if conn.QueryRow(ctx, "SELECT setting FROM pg_config WHERE name = 'BINDIR'").Scan(&bindir) == nil {
			dirs = append(dirs, bindir)
		}
		var num int
		if conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num) == nil {
			dirs = append(dirs, fmt.Sprintf("/usr/lib/postgresql/%d/bin", num/10000))
		}
		_ = conn.Close(ctx)
	}
	for _, d := range dirs {
		if p := filepath.Join(d, "pgbench"); isExecutable(p) {
			return &pgbench{path: p}, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return &pgbench{path: p}, nil
	}
	looked := append(dirs, "$PATH")
	return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--vs-pgbench: pgbench not found (looked in %s); "+
		"install PostgreSQL's client programs (e.g. `apt-get install postgresql-client`) or pass --pgbench PATH", strings.Join(looked, ", "))}
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// pgbenchScript is a workload's SQL as a pgbench script, with the values it
// needs from the command line (-D).
type pgbenchScript struct {
	text    string
	defines map[string]string
}

var paramRE = regexp.MustCompile(`\$(\d+)`)

// pgbenchSQL turns one of bank-sim's statements into a line of a pgbench
// script: $1, $2, … become args (pgbench variables such as :from, or SQL
// literals), so that the statement pgbench prepares is bank-sim's, word for
// word.
func pgbenchSQL(sql string, args ...string) string {
	out := paramRE.ReplaceAllStringFunc(sql, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		if n < 1 || n > len(args) {
			panic(fmt.Sprintf("bench: %s has no argument for %s", sql, m))
		}
		return args[n-1]
	})
	return strings.Join(strings.Fields(out), " ") + ";\n"
}

// pgbenchPair picks two distinct accounts of n at random, as bank-sim's
// clients do (benchPair): from uniformly, to uniformly among the others.
const pgbenchPair = `\set from random(1, :accounts)
\set to random(1, :accounts - 1)
\set to case when :to >= :from then :to + 1 else :to end
`

// pgbenchRun is what one pgbench run reports.
type pgbenchRun struct {
	Transactions int           `json:"transactions"`
	Failed       int           `json:"failed"`
	PerSecond    float64       `json:"perSecond"`
	LatencyAvg   time.Duration `json:"latencyAvgNs"`
}

var (
	pgbenchTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchDone    = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	pgbenchFailed  = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	pgbenchLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// run runs script with clients connections for d (whole seconds: pgbench's
// -T) against the database at url. Deadlocks and serialization failures are
// retried up to five times (--max-tries), as bank-sim's InTx does.
func (pb *pgbench) run(ctx context.Context, url string, s pgbenchScript, clients int, d time.Duration, seed uint64) (pgbenchRun, error) {
	f, err := os.CreateTemp("", "bank-sim-pgbench-*.sql")
	if err != nil {
		return pgbenchRun{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(s.text); err != nil {
		f.Close()
		return pgbenchRun{}, err
	}
	if err := f.Close(); err != nil {
		return pgbenchRun{}, err
	}
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, runtime.NumCPU())),
		"-T", strconv.Itoa(int(d / time.Second)), "--max-tries", "5", "--random-seed", strconv.FormatUint(seed, 10), "-f", f.Name()}
	for k, v := range s.defines {
		args = append(args, "-D", k+"="+v)
	}
	args = append(args, url)
	cmd := exec.CommandContext(ctx, pb.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return pgbenchRun{}, ctx.Err()
	}
	out := stdout.String()
	var r pgbenchRun
	m := pgbenchDone.FindStringSubmatch(out)
	t := pgbenchTPS.FindStringSubmatch(out)
	if err == nil && m == nil {
		err = errors.New("no figures in its output")
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "…" + msg[len(msg)-600:]
		}
		return r, fmt.Errorf("pgbench (%s): %v: %s", pb.path, err, msg)
	}
	r.Transactions, _ = strconv.Atoi(m[1])
	// pgbench prints no rate for a run that finished no transaction (its
	// clients may take the whole -T to connect on a busy machine): a run
	// of 0, which the caller reports as too short.
	if t != nil {
		r.PerSecond, _ = strconv.ParseFloat(t[1], 64)
	}
	if m := pgbenchFailed.FindStringSubmatch(out); m != nil {
		r.Failed, _ = strconv.Atoi(m[1])
	}
	if m := pgbenchLatency.FindStringSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		r.LatencyAvg = time.Duration(ms * float64(time.Millisecond))
	}
	return r, nil
}
