// Package cmd is bank-sim's command line: it wires the domain packages to
// cobra, owns the exit codes, and prints. Every command gets its streams,
// clock, environment and database through one App, so tests can run the
// whole tree in-process with buffers.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/internal/termtext"
	"github.com/banksim/bank-sim/postgres"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
)

// Exit codes. Scripts and CI read these, so they never change meaning.
const (
	ExitOK          = 0 // every expectation and invariant held
	ExitFailed      = 1 // something broke: an invariant, an expectation, a check
	ExitUsage       = 2 // the command line was wrong
	ExitDatabase    = 3 // PostgreSQL could not be started or reached
	ExitUnreachable = 3 // probe: the target could not be reached (not a failed check)
	// ExitInconclusive: a chaos run broke no rule but never exercised some
	// defence (or some fault never fired), so it vouches for nothing there.
	ExitInconclusive = 4
	ExitInterrupted  = 130 // stopped by Ctrl-C or SIGTERM
)

// Version is set at build time with -ldflags "-X github.com/banksim/bank-sim/cmd.Version=…".
var Version = ""

// version is Version, else what the Go toolchain recorded in the binary:
// the module's version (a tag, or a pseudo-version from `go install
// …@version`), else the commit it was built from, else "devel".
func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionFrom(bi)
}

func versionFrom(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(len(rev), 12)]
	if modified == "true" {
		v += "+dirty"
	}
	return v
}

// Env is everything a command may touch outside the process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	Now    func() time.Time
	// Terminal reports whether Stdout is a terminal (colour, progress).
	Terminal bool
	// StdinTerminal reports whether Stdin is a terminal: --step needs one
	// to read the instructor's keys.
	StdinTerminal bool
	// StderrTerminal reports whether Stderr is a terminal, on which a
	// prompt or a progress line can be wiped once done.
	StderrTerminal bool
	// Width is the terminal's width in columns, or $COLUMNS; 0 when
	// unknown (output is then not wrapped).
	Width int
	// Postgres starts or reaches the database; postgres.Start in production.
	Postgres func(ctx context.Context, o postgres.Options) (*postgres.Server, error)
}

// OSEnv is the real environment.
func OSEnv() *Env {
	width := termWidth(os.Stdout)
	if width == 0 {
		width = columnsEnv(os.Getenv)
	}
	return &Env{
		Stdin:          os.Stdin,
		Stdout:         os.Stdout,
		Stderr:         os.Stderr,
		Getenv:         os.Getenv,
		Now:            time.Now,
		Terminal:       isTerminal(os.Stdout),
		StdinTerminal:  isTerminal(os.Stdin),
		StderrTerminal: isTerminal(os.Stderr),
		Width:          width,
		Postgres:       postgres.Start,
	}
}

func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// ExitError carries an exit code up to Main, with the message to print.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func usageError(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// errFailed is returned by a command that ran and found something broken;
// it has already said what.
var errFailed = &ExitError{Code: ExitFailed, Err: errors.New("")}

// App is the state shared by the commands of one invocation.
type App struct {
	Env *Env

	noColor     bool
	databaseURL string
	// leftAlone, set by a command that starts no PostgreSQL, says what an
	// interrupt leaves as it is (probe: the target keeps running); the
	// interrupt message says it instead of "nothing was left running".
	leftAlone string

	mu  sync.Mutex
	srv *postgres.Server
}

// externalURL is the server to use instead of starting one, if any.
func (a *App) externalURL() string {
	if a.databaseURL != "" {
		return a.databaseURL
	}
	return a.Env.Getenv("DATABASE_URL")
}

// Server starts (or reaches) PostgreSQL on first use; Main stops it.
func (a *App) Server(ctx context.Context) (*postgres.Server, error) {
	return a.serverWith(ctx, postgres.Options{})
}

// serverWith is Server with o's listening addresses and clients (a
// partitioned run's links); o.URL is always the external one.
func (a *App) serverWith(ctx context.Context, o postgres.Options) (*postgres.Server, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.srv != nil {
		return a.srv, nil
	}
	done := a.startingNote()
	o.URL = a.externalURL()
	srv, err := a.Env.Postgres(ctx, o)
	done()
	if err != nil {
		return nil, &ExitError{Code: ExitDatabase, Err: a.databaseError(err)}
	}
	a.srv = srv
	return srv, nil
}

// close stops the embedded server, or drops this run's databases on an
// external one, and says which it did, for the interrupt message.
func (a *App) close() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.srv == nil {
		if a.leftAlone != "" {
			return a.leftAlone
		}
		return "nothing was left running"
	}
	srv := a.srv
	a.srv = nil
	if err := srv.Close(); err != nil {
		fmt.Fprintf(a.Env.Stderr, "bank-sim: stopping PostgreSQL: %v\n", err)
		if srv.Embedded() {
			return "stopping PostgreSQL failed (see above)"
		}
		return "dropping this run's databases failed (see above); the next run, or bank-sim prune, drops what is left"
	}
	if srv.Embedded() {
		return "PostgreSQL stopped, nothing left running"
	}
	return "this run's databases are dropped; the PostgreSQL server at --database-url / DATABASE_URL is not bank-sim's and keeps running"
}

// Main runs bank-sim with os.Args and returns the exit code.
func Main() int {
	postgres.MaybeSupervise()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks every command to stop and clean up; a second
	// one ends the process at once, as if bank-sim caught none (the
	// embedded PostgreSQL's supervisor stops it when bank-sim dies).
	context.AfterFunc(ctx, stop)
	return Run(ctx, OSEnv(), os.Args[1:])
}

// Run runs one command line in env and returns the exit code. It never
// panics and never leaves PostgreSQL running.
func Run(ctx context.Context, env *Env, args []string) (code int) {
	// Whatever a command prints may carry outside text (a target's
	// answer, a file's strings): none of its control bytes reach the
	// terminal, whichever command or line printed it.
	app := &App{}
	safe := *env
	safe.Stdout = termtext.NewWriter(env.Stdout, app.colorEnabled)
	safe.Stderr = termtext.NewWriter(env.Stderr, app.colorEnabled)
	env = &safe
	app.Env = env
	defer app.close()
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(env.Stderr, "bank-sim: internal error: %v\n(this is a bug in bank-sim; please report it with the command you ran)\n", v)
			code = ExitFailed
		}
	}()

	root := NewRoot(app)
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	c, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if ctx.Err() != nil {
		// Said once it is true: after the server is closed.
		fmt.Fprintln(env.Stderr, "bank-sim: interrupted; "+app.close())
		return ExitInterrupted
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		// cobra's own errors are about the command line.
		ee = &ExitError{Code: ExitUsage, Err: err}
	}
	if msg := ee.Err.Error(); msg != "" {
		fmt.Fprintf(env.Stderr, "bank-sim: %s\n", msg)
		if ee.Code == ExitUsage {
			fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", helpPath(c))
		}
	}
	return ee.Code
}

// helpPath is the command whose --help explains a usage error: the
// subcommand that was run, or bank-sim itself.
func helpPath(c *cobra.Command) string {
	if c == nil {
		return "bank-sim"
	}
	return c.CommandPath()
}
