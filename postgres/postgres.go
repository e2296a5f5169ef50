// Package postgres gives bank-sim a real PostgreSQL server: either an
// existing one (DATABASE_URL) or a private cluster it starts itself from
// locally installed (or, as a last resort, downloaded) binaries.
//
// # Lifetime of an embedded server
//
// The embedded cluster is run by a supervisor: this same executable,
// re-executed with an environment variable set, which MaybeSupervise
// detects. As root the supervisor drops to nobody first, because initdb and
// postgres refuse to run as root. It then runs the postmaster itself, as its
// own direct child, instead of through pg_ctl: pg_ctl detaches the server
// (it is reparented to init), so a SIGKILL of the supervisor used to leave it
// listening for good. Two parent-death signals (prctl PR_SET_PDEATHSIG,
// which the kernel delivers however the parent dies, SIGKILL included) chain
// the three processes together:
//
//	bank-sim ──SIGTERM──▶ supervisor ──SIGQUIT──▶ postmaster ──▶ backends
//
// If bank-sim dies, the supervisor gets SIGTERM and stops the server
// cleanly; if the supervisor dies, the postmaster gets SIGQUIT (PostgreSQL's
// immediate shutdown) and takes its backends with it, within milliseconds.
// The signal is a property of the thread that forked the child and is
// cleared by a change of credentials, so each fork happens on a thread kept
// alive for the child's life (runtime.LockOSThread), and only after the
// supervisor has dropped root. The supervisor also stops the server when
// bank-sim closes its stdin (Close, or bank-sim's exit or panic) or sends it
// SIGINT/SIGTERM/SIGHUP. A server found in a slot at start (left by an older
// bank-sim that used pg_ctl) is stopped before the slot is used.
//
// embedded-postgres still resolves versions and downloads binaries for users
// without a local PostgreSQL; it starts a scratch cluster only to do so.
//
// # Databases and their owners
//
// See marker.go and owner.go: every database this package creates carries
// a marker in its comment, bound to its oid, and bank-sim drops, alters or
// renames no database without it, whatever its name; and its name carries
// the key of an advisory lock its process holds for its lifetime, so that
// leftovers of dead processes can be told from databases in use, on any
// server and from any host.
//
// # When the embedded PostgreSQL dies
//
// See events.go: its supervisor starts it again and says so, or, if it
// cannot, says why and exits (Server.Lost).
package postgres

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnavailable is wrapped by every error that means PostgreSQL could not
// be started or reached; the wrapping message says what to do about it.
var ErrUnavailable = errors.New("PostgreSQL unavailable")

const fixHint = "install PostgreSQL (e.g. `apt-get install postgresql`), " +
	"or set BANK_SIM_PG_BINARIES to a directory containing bin/pg_ctl, " +
	"or point --database-url / DATABASE_URL at a running server"

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}

// Options chooses the server.
type Options struct {
	// URL uses an existing server (DATABASE_URL) instead of starting one.
	// Only databases bank-sim created are touched (marker.go): those this
	// process creates, and those of bank-sim processes that have ended
	// (owner.go). Connections to it time out after DefaultConnectTimeout
	// unless the URL sets connect_timeout.
	URL string
	// BinariesPath is a PostgreSQL installation (containing bin/pg_ctl).
	// "" means $BANK_SIM_PG_BINARIES, else the newest
	// /usr/lib/postgresql/<major>, else `pg_config --bindir`/.., else a
	// download by embedded-postgres.
	BinariesPath string
	// CacheDir holds clusters (and downloaded binaries). "" means
	// $BANK_SIM_CACHE_DIR, else /var/cache/bank-sim as root, else
	// os.UserCacheDir()/bank-sim. As root it must be searchable by nobody.
	CacheDir string
	// Log receives the PostgreSQL server log; nil discards it.
	Log io.Writer
	// ListenAddresses are IP addresses an embedded server listens on
	// besides 127.0.0.1, and AllowClients the networks (CIDR) it takes
	// password logins from on them: a run's private network, whose
	// addresses must exist before Start (faults/netns). The cluster's own
	// pg_hba.conf is not changed: the server reads a copy with those lines
	// added, in the slot's tmp directory.
	ListenAddresses []string
	AllowClients    []string

	// snapshot overrides the built-in snapshot a new cluster is unpacked
	// from: "off" for initdb, or an archive's path (tests).
	snapshot string
}

// Server is a running (or reachable) PostgreSQL server.
type Server struct {
	embedded bool
	desc     string
	adminURL string // connection string for CREATE/DROP DATABASE
	dbURL    func(name string) string
	major    int
	// owner marks this process's databases (owner.go).
	owner *owner

	// embedded only
	stdin    *os.File
	proc     *os.Process
	done     chan struct{}
	lost     chan struct{} // closed if the supervisor exits before Close
	dataDir  string
	postPID  int
	stderr   *tailWriter
	waitErr  error
	slotPath string
	// replies carries the supervisor's answers to commands, one a line.
	replies chan string
	cmdMu   sync.Mutex
	cmdErr  error // set when a command's answer was not waited for

	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool

	tplMu sync.Mutex
	tpls  map[string]*tplEntry

	// pending lists, by template, the databases being created from it
	// (pending.go).
	pendMu  sync.Mutex
	pending map[string][]string

	keptMu sync.Mutex // one TakeKept at a time (kept.go)

	// What the supervisor said on its own (events.go).
	evMu         sync.Mutex
	notify       func(string)
	lostMsg      string
	lostReported bool

	closeOnce sync.Once
	closeErr  error
}

// Start starts (or, with o.URL, connects to) a PostgreSQL server. Every
// error wraps ErrUnavailable. The caller must Close the server; if it
// cannot (panic, signal, SIGKILL) the embedded server stops by itself.
func Start(ctx context.Context, o Options) (*Server, error) {
	if os.Getenv(envSupervisor) != "" {
		// We are a re-executed supervisor whose main did not call
		// MaybeSupervise: starting another would recurse forever.
		return nil, unavailable("%s is set but MaybeSupervise was not called first thing in main/TestMain", envSupervisor)
	}
	if !superviseCalled.Load() {
		return nil, unavailable("postgres.MaybeSupervise must be called first thing in main() and in TestMain (pgtest.Run does it)")
	}
	if o.URL != "" {
		return startExternal(ctx, o)
	}
	return startEmbedded(ctx, o)
}

// Embedded reports whether this process started the server.
func (s *Server) Embedded() bool { return s.embedded }

// AdminURL is the connection string of the server's maintenance database,
// password included. Tests use an embedded server's as the URL of an
// "external" one.
func (s *Server) AdminURL() string { return s.adminURL }

// Describe returns a one-line description without credentials.
func (s *Server) Describe() string { return s.desc }

// ErrNotEmbedded is returned by Crash for a server this process did not start.
var ErrNotEmbedded = errors.New("only a PostgreSQL that bank-sim started itself can be crashed; not one at --database-url / DATABASE_URL")

// closeIdleAdmin closes the idle admin connections of a server that died
// (crashed, or restarted by its supervisor), so that no later statement is
// handed a dead one.
func (s *Server) closeIdleAdmin() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_ = c.Close(ctx)
		cancel()
	}
}

// Crash kills the embedded server's postmaster with SIGKILL, as kill -9 or
// the OOM killer would, and starts it again on the same data directory and
// port. It returns once the server accepts connections again, having
// recovered from its WAL: every committed transaction is still there.
// Connections open at the time of the crash are broken; pools must discard
// them (pgxpool does on their first error). Only for an embedded server.
func (s *Server) Crash(ctx context.Context) error {
	if !s.embedded {
		return ErrNotEmbedded
	}
	r, err := s.command(ctx, cmdCrash, "crash and restart")
	if err != nil {
		return err
	}
	var pid int
	fmt.Sscanf(r, "ok %d", &pid)
	s.mu.Lock()
	s.postPID = pid
	s.mu.Unlock()
	// The lock died with the server's sessions: take it again.
	if err := s.owner.ensure(ctx); err != nil {
		return unavailable("after the crash: %v", err)
	}
	return nil
}

// command sends the supervisor one command (cmdCrash, cmdKillPrimary) and
// returns its "ok …" answer; what names the command in errors. Either way
// the server's idle admin connections are closed: the command kills it.
func (s *Server) command(ctx context.Context, cmd, what string) (string, error) {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	if s.cmdErr != nil {
		return "", s.cmdErr
	}
	if _, err := io.WriteString(s.stdin, cmd+"\n"); err != nil {
		return "", unavailable("asking the supervisor to %s: %v", what, err)
	}
	s.closeIdleAdmin() // they die with the server
	select {
	case r, ok := <-s.replies:
		switch {
		case !ok:
			s.cmdErr = unavailable("the PostgreSQL supervisor exited during %s: %s", what, strings.TrimSpace(s.stderr.String()))
			return "", s.cmdErr
		case strings.HasPrefix(r, "ok"):
			return r, nil
		default:
			return "", unavailable("%s: %s", what, strings.TrimPrefix(r, "error "))
		}
	case <-ctx.Done():
		// The answer will come, to no one: no later command can trust
		// the next line.
		s.cmdErr = unavailable("%s abandoned: %v", what, ctx.Err())
		return "", ctx.Err()
	}
}

// Close stops the embedded server, or, on an external one, drops every
// database this process created that is still there (its templates, and
// any a Database's Drop did not get to), and ends the session that marks
// them as in use. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	var errs []error
	if !s.embedded && s.owner != nil {
		errs = append(errs, s.dropOwn())
	}
	if s.owner != nil {
		// From here on, anything of ours still there is an orphan.
		s.owner.release()
	}
	s.mu.Lock()
	s.closed = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(ctx)
		cancel()
	}
	if s.embedded {
		err := s.stopSupervisor(15 * time.Second)
		s.evMu.Lock()
		if s.lostMsg != "" {
			// It had exited already, having said why; said once, by
			// whoever asked LostReason, else here.
			err = nil
			if !s.lostReported {
				err = errors.New(s.lostMsg)
			}
		}
		s.evMu.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopSupervisor closes the supervisor's stdin, which tells it to stop the
// postmaster, and kills it if it does not manage within timeout.
func (s *Server) stopSupervisor(timeout time.Duration) error {
	if s.stdin != nil {
		_ = s.stdin.Close()
	}
	select {
	case <-s.done:
		if s.waitErr != nil {
			return fmt.Errorf("postgres supervisor: %v: %s", s.waitErr, s.stderr.String())
		}
		return nil
	case <-time.After(timeout):
		// SIGTERM first so it can still stop the postmaster.
		_ = s.proc.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.proc.Kill()
			<-s.done
		}
		return fmt.Errorf("postgres supervisor did not stop within %v", timeout)
	}
}

func startEmbedded(ctx context.Context, o Options) (*Server, error) {
	began := time.Now()
	s, st, bin, err := spawnSupervisor(ctx, o, supMode{})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		if s.owner != nil {
			s.owner.release()
		}
		_ = s.stopSupervisor(10 * time.Second)
		return nil, err
	}
	conn, err := s.admin(ctx)
	if err != nil {
		return fail(unavailable("connecting to the embedded PostgreSQL on 127.0.0.1:%d: %v", st.Port, err))
	}
	version := s.serverVersion(ctx, conn)
	s.owner, err = newOwner(ctx, s.adminURL)
	if err != nil {
		s.release(conn, err)
		return fail(unavailable("embedded PostgreSQL on 127.0.0.1:%d: %v", st.Port, err))
	}
	// A killed earlier run in this slot may have left scenario databases:
	// nobody else can be using them, since we hold the slot.
	dropped, dropErr := dropLeftovers(ctx, conn)
	s.release(conn, dropErr)
	how := "new cluster"
	switch {
	case st.Reused:
		how = "cluster reused"
	case st.Snapshot != "":
		how = "new cluster from " + st.Snapshot
	}
	s.desc = fmt.Sprintf("embedded PostgreSQL %s on 127.0.0.1:%d (%s), slot %d, %s, ready in %.2f s", version, st.Port, bin.path, st.Slot, how, time.Since(began).Seconds())
	if dropped > 0 {
		s.desc += fmt.Sprintf("; dropped %d %s left by killed bank-sim runs", dropped, plural(dropped, "database", "databases"))
	}
	if dropErr != nil {
		// Not fatal: the run gets databases of its own; the next run (or
		// bank-sim prune) tries again.
		s.desc += fmt.Sprintf("; could not drop leftovers (%v)", dropErr)
	}
	return s, nil
}

// supMode is what a supervisor runs besides the one server of a slot: a
// primary and its streaming standby (pair.go).
type supMode struct {
	Pair bool
	Sync bool
}

// spawnSupervisor starts this executable again as a supervisor in mode and
// waits for its status: once it returns, the supervisor's server (or pair)
// accepts connections, and s.adminURL reaches it. On error nothing of it is
// left running.
func spawnSupervisor(ctx context.Context, o Options, mode supMode) (*Server, supStatus, binaries, error) {
	bin, err := resolveBinaries(ctx, o.BinariesPath)
	if err != nil {
		return nil, supStatus{}, binaries{}, err
	}
	cacheDir, err := resolveCacheDir(o.CacheDir)
	if err != nil {
		return nil, supStatus{}, binaries{}, err
	}
	snap := o.snapshot
	if snap == "" {
		switch env := os.Getenv("BANK_SIM_SNAPSHOT"); env {
		case "", snapshotOff:
			snap = env
		default:
			return nil, supStatus{}, binaries{}, unavailable("BANK_SIM_SNAPSHOT=%s: only \"off\" is understood (make new clusters with initdb instead of unpacking bank-sim's snapshot); unset it otherwise", env)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, supStatus{}, binaries{}, unavailable("cannot find own executable to run the PostgreSQL supervisor: %v", err)
	}
	cfg := supConfig{
		ParentPID: os.Getpid(),
		Binaries:  bin.path,
		Download:  bin.download,
		Version:   string(bin.version),
		Major:     bin.major,
		CacheDir:  cacheDir,
		Log:       o.Log != nil,
		Snapshot:  snap,
		Listen:    o.ListenAddresses,
		Clients:   o.AllowClients,
		Pair:      mode.Pair,
		Sync:      mode.Sync,
	}
	if err := checkListen(o.ListenAddresses, o.AllowClients); err != nil {
		return nil, supStatus{}, binaries{}, unavailable("%v", err)
	}
	cfgJSON, _ := json.Marshal(cfg)

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, supStatus{}, binaries{}, unavailable("pipe: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, supStatus{}, binaries{}, unavailable("pipe: %v", err)
	}
	s := &Server{
		embedded: true,
		stdin:    stdinW,
		done:     make(chan struct{}),
		lost:     make(chan struct{}),
		stderr:   &tailWriter{max: 8 << 10},
		major:    bin.major,
		tpls:     map[string]*tplEntry{},
	}
	var stderr io.Writer = s.stderr
	if o.Log != nil {
		stderr = io.MultiWriter(o.Log, s.stderr)
	}
	cmd := exec.Command(exe)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), envSupervisor+"=1", envConfig+"="+string(cfgJSON))
	cmd.Stdin = stdinR
	cmd.Stdout = outW
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGTERM,
		// Own process group: a terminal's Ctrl-C goes to us only, so we
		// decide when the database goes away (after reporting, say).
		Setpgid: true,
	}

	started := make(chan error, 1)
	// outRead is closed once the supervisor's stdout has been read to its
	// end: the line in which it says why it exits comes before its exit,
	// but is read by another goroutine, which a loaded machine can run
	// after Wait has returned.
	outRead := make(chan struct{})
	go func() {
		// Pdeathsig fires when the thread that forked the child exits, not
		// the process: pin this goroutine to its thread for the child's life.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(s.done)
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		close(s.done)
		s.mu.Lock()
		asked := s.closed
		s.mu.Unlock()
		if !asked {
			// Lost only once its reason has been read (LostReason).
			select {
			case <-outRead:
			case <-time.After(10 * time.Second):
			}
			close(s.lost)
		}
	}()
	err = <-started
	stdinR.Close()
	outW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		return nil, supStatus{}, binaries{}, unavailable("cannot run the PostgreSQL supervisor (%s): %v", exe, err)
	}
	s.proc = cmd.Process

	fail := func(err error) (*Server, supStatus, binaries, error) {
		_ = s.stopSupervisor(10 * time.Second)
		return nil, supStatus{}, binaries{}, err
	}

	type line struct {
		b   []byte
		err error
	}
	lines := make(chan line, 1)
	s.replies = make(chan string, 1)
	go func() {
		defer close(outRead)
		defer outR.Close()
		br := bufio.NewReader(outR)
		b, err := br.ReadBytes('\n')
		lines <- line{b, err}
		if err != nil {
			return
		}
		// Then the answers to commands (Crash) and the supervisor's own
		// events, until it exits.
		for {
			b, err := br.ReadBytes('\n')
			if err != nil {
				close(s.replies)
				return
			}
			line := strings.TrimSpace(string(b))
			if ev, ok := strings.CutPrefix(line, eventPrefix+" "); ok {
				s.event(ev)
				continue
			}
			s.replies <- line
		}
	}()
	timeout := 2 * time.Minute
	if bin.download {
		timeout = 15 * time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var st supStatus
	select {
	case l := <-lines:
		if l.err != nil {
			<-s.done
			return nil, supStatus{}, binaries{}, unavailable("PostgreSQL supervisor exited without reporting (%v): %s; %s", s.waitErr, strings.TrimSpace(s.stderr.String()), fixHint)
		}
		if err := json.Unmarshal(l.b, &st); err != nil {
			return fail(unavailable("bad status from PostgreSQL supervisor %q: %v", l.b, err))
		}
	case <-ctx.Done():
		return fail(unavailable("starting PostgreSQL: %v", ctx.Err()))
	case <-timer.C:
		return fail(unavailable("PostgreSQL did not start within %v; server log: %s", timeout, strings.TrimSpace(s.stderr.String())))
	}
	if st.Error != "" {
		if strings.Contains(st.Error, "BANK_SIM_CACHE_DIR") {
			return fail(unavailable("%s", st.Error))
		}
		return fail(unavailable("%s; %s", st.Error, fixHint))
	}
	s.dataDir = st.DataDir
	s.postPID = st.PostmasterPID
	s.slotPath = st.SlotDir
	s.adminURL = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", st.Password, st.Port)
	s.dbURL = func(name string) string {
		return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", st.Password, st.Port, name)
	}
	return s, st, bin, nil
}

func (s *Server) serverVersion(ctx context.Context, conn *pgx.Conn) string {
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	if f := strings.Fields(v); len(f) > 0 {
		v = f[0]
	}
	var major int
	fmt.Sscanf(v, "%d", &major)
	if major > 0 {
		s.major = major
	}
	return v
}

// admin returns an idle admin connection or opens one. Several are kept so
// parallel tests can clone concurrently.
func (s *Server) admin(ctx context.Context) (*pgx.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, unavailable("server is closed")
	}
	for len(s.idle) > 0 {
		c := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if !c.IsClosed() {
			s.mu.Unlock()
			return c, nil
		}
	}
	s.mu.Unlock()
	return pgx.Connect(ctx, s.adminURL)
}

func (s *Server) release(c *pgx.Conn, err error) {
	if c == nil {
		return
	}
	s.mu.Lock()
	// A connection that saw an error may be mid-transaction or broken.
	if err == nil && !s.closed && !c.IsClosed() && c.PgConn().TxStatus() == 'I' && len(s.idle) < 4 {
		s.idle = append(s.idle, c)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// tailWriter keeps the last max bytes written, for error messages.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}
