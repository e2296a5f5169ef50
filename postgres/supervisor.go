package postgres

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"

	"github.com/banksim/bank-sim/postgres/internal/snapshot"
)

const (
	envSupervisor = "BANK_SIM_PG_SUPERVISOR"
	envConfig     = "BANK_SIM_PG_SUPERVISOR_CONFIG"
	maxSlots      = 64
)

var superviseCalled atomic.Bool

type supConfig struct {
	ParentPID int
	Binaries  string
	Download  bool
	Version   string
	Major     int
	CacheDir  string
	Log       bool
	// Snapshot is "" for the built-in snapshot when one fits, "off" for
	// initdb always, else an archive's path (tests).
	Snapshot string
	// Listen and Clients: Options.ListenAddresses and AllowClients.
	Listen  []string `json:",omitempty"`
	Clients []string `json:",omitempty"`
	// Pair runs a primary and its streaming standby instead of the slot's
	// cluster (pair.go); Sync makes the primary's commits wait for the
	// standby.
	Pair bool
	Sync bool
}

type supStatus struct {
	Error         string `json:"error,omitempty"`
	Port          int    `json:"port,omitempty"`
	Slot          int    `json:"slot"`
	SlotDir       string `json:"slot_dir,omitempty"`
	DataDir       string `json:"data_dir,omitempty"`
	Reused        bool   `json:"reused"`
	Snapshot      string `json:"snapshot,omitempty"` // what a new cluster was unpacked from
	Password      string `json:"password,omitempty"`
	PostmasterPID int    `json:"postmaster_pid,omitempty"`
	// A pair's standby (pair.go).
	StandbyPort int    `json:"standby_port,omitempty"`
	StandbyPID  int    `json:"standby_pid,omitempty"`
	StandbyDir  string `json:"standby_dir,omitempty"`
	// Steps says how long a pair's start took, step by step.
	Steps string `json:"steps,omitempty"`
}

// MaybeSupervise must be called first thing in main() and in TestMain of
// any test binary that starts a server. If this process was re-executed by
// Start as the PostgreSQL supervisor, it runs the supervisor and exits;
// otherwise it returns immediately.
func MaybeSupervise() {
	superviseCalled.Store(true)
	if os.Getenv(envSupervisor) == "" {
		return
	}
	os.Exit(supervise())
}

func supervise() int {
	// The parent-death signal we re-arm below is a property of this thread;
	// keep it alive by never letting the main goroutine leave it.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	var cfg supConfig
	err := json.Unmarshal([]byte(os.Getenv(envConfig)), &cfg)
	os.Unsetenv(envSupervisor)
	os.Unsetenv(envConfig)
	out := json.NewEncoder(os.Stdout)
	if err != nil {
		out.Encode(supStatus{Error: "bad supervisor config: " + err.Error()})
		return 2
	}
	sv := &supervisor{cfg: cfg, logw: io.Discard}
	if cfg.Log {
		sv.logw = os.Stderr
	}
	if cfg.Pair {
		return sv.supervisePair(sigs, out)
	}
	st, err := sv.start(sigs)
	if err != nil {
		out.Encode(supStatus{Error: err.Error()})
		sv.cleanupTmp()
		return 1
	}
	if err := out.Encode(st); err != nil {
		// Parent gone before it heard from us.
		sv.stop()
		return 1
	}

	go sv.reapOrphans()

	cmds, eof := readCommands()
	code := 0
loop:
	for {
		select {
		case <-eof:
			break loop
		case <-sigs:
			break loop
		case <-sv.died():
			// Not asked for: kill -9, the OOM killer, a crash.
			old, how := sv.pm.pid, exitHow(sv.pm.err)
			sv.pm = nil
			if err := sv.restart(); err != nil {
				fmt.Fprintf(os.Stdout, "%s %s PostgreSQL (postmaster %d) %s, and bank-sim could not start it again: %s\n",
					eventPrefix, eventLost, old, how, strings.ReplaceAll(err.Error(), "\n", " "))
				code = 1
				break loop
			}
			fmt.Fprintf(os.Stdout, "%s %s %d PostgreSQL (postmaster %d) %s; bank-sim started it again (postmaster %d), and it recovered from its WAL: every committed transaction is still there\n",
				eventPrefix, eventRestarted, sv.pm.pid, old, how, sv.pm.pid)
		case c := <-cmds:
			switch c {
			case cmdCrash:
				if err := sv.crash(); err != nil {
					fmt.Fprintf(os.Stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				} else {
					fmt.Fprintf(os.Stdout, "ok %d\n", sv.pm.pid)
				}
			default:
				fmt.Fprintf(os.Stdout, "error unknown command %q\n", c)
			}
		}
	}
	os.Stdout.Close()
	if err := sv.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bank-sim postgres supervisor: stop:", err)
		return 1
	}
	return code
}

// readCommands reads the parent's commands, one a line on stdin, each
// answered with one line on stdout; eof is closed at EOF, which means stop.
func readCommands() (cmds <-chan string, eof <-chan struct{}) {
	c := make(chan string)
	e := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			c <- strings.TrimSpace(sc.Text())
		}
		close(e)
	}()
	return c, e
}

// Lines the supervisor writes on its own, not as the answer to a command:
// "event restarted <new pid> <what happened>" once it has started again a
// postmaster that died without being asked to, "event lost <what
// happened>" when it could not, just before it exits.
const (
	eventPrefix    = "event"
	eventRestarted = "restarted"
	eventLost      = "lost"
)

// maxRestarts bounds the restarts of a postmaster that keeps dying: more
// than this many within restartWindow and the supervisor gives up.
const (
	maxRestarts   = 3
	restartWindow = time.Minute
)

// died is closed when the running postmaster has exited; nil (never ready)
// when none runs.
func (sv *supervisor) died() <-chan struct{} {
	if sv.pm == nil {
		return nil
	}
	return sv.pm.done
}

// restart starts the server again after its postmaster died on its own.
func (sv *supervisor) restart() error {
	now := time.Now()
	recent := sv.restarts[:0]
	for _, t := range sv.restarts {
		if now.Sub(t) < restartWindow {
			recent = append(recent, t)
		}
	}
	sv.restarts = append(recent, now)
	if len(sv.restarts) > maxRestarts {
		return fmt.Errorf("it died %d times within %s", len(sv.restarts), restartWindow)
	}
	// Its backends were reparented when it died; they notice and exit by
	// themselves, and the new postmaster refuses to start while one still
	// holds the old shared memory: relaunch retries until they are gone.
	return sv.relaunch(nil)
}

// exitHow says how a postmaster ended, from its Wait error.
func exitHow(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	if err != nil {
		return fmt.Sprintf("ended (%v)", err)
	}
	return "exited"
}

type supervisor struct {
	cfg     supConfig
	logw    io.Writer
	root    string // CacheDir/pg<major>
	slot    int
	slotDir string
	lock    *os.File
	binPath string // contains bin/postgres
	port    int
	params  map[string]string
	pm      *postmaster // nil while no server runs; a pair's primary
	standby *postmaster // a pair's standby (pair.go)
	// restarts are the times of the restarts after a postmaster died on
	// its own, within the last restartWindow.
	restarts []time.Time
}

// cmdCrash asks the supervisor to SIGKILL the postmaster and start it again
// on the same data directory and port.
const cmdCrash = "crash"

// startTimeout bounds a start, crash recovery included.
const startTimeout = 30 * time.Second

// crash kills the postmaster with SIGKILL, as the OOM killer or kill -9
// would: no shutdown checkpoint, backends cut off mid-transaction. Once it
// and every child of it are gone it starts the server again on the same data
// directory and port; PostgreSQL recovers from its WAL, so every transaction
// that had committed is still there.
func (sv *supervisor) crash() error {
	kids, err := sv.killPostmaster("the server")
	if err != nil {
		return err
	}
	return sv.relaunch(kids)
}

// killPostmaster SIGKILLs the running postmaster (which names it in
// errors), waits at most 10 s for it to exit and forgets it. It returns the
// children it had: they notice its death and exit by themselves (reap).
func (sv *supervisor) killPostmaster(which string) ([]int, error) {
	pm := sv.pm
	if pm == nil {
		return nil, fmt.Errorf("%s is not running", which)
	}
	kids := childrenOf(pm.pid)
	if err := pm.proc.Signal(syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("kill -9 %d: %v", pm.pid, err)
	}
	select {
	case <-pm.done:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("%s's postmaster %d survived SIGKILL for 10 s", which, pm.pid)
	}
	sv.pm = nil
	return kids, nil
}

// reap waits up to 10 s for a dead postmaster's children to exit, kills
// those that linger, and reports whether all are gone 5 s later.
func reap(kids []int) bool {
	if waitGone(10*time.Second, kids...) {
		return true
	}
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	return waitGone(5*time.Second, kids...)
}

// relaunch starts the postmaster again on the same data directory and port
// after the last one died. Backends notice their postmaster's death and
// exit by themselves; the new postmaster refuses to start while one still
// holds the old shared memory. kids are the old postmaster's children, if
// known (they are reparented once it is dead).
func (sv *supervisor) relaunch(kids []int) error {
	reap(kids)
	// The old postmaster.pid stays: PostgreSQL sees that its pid is dead
	// and uses it to clean up the old shared memory itself. The port may
	// still be held for a moment by the dying backends' sockets.
	deadline := time.Now().Add(10 * time.Second)
	for {
		pm, err := launchPostmaster(sv.binPath, sv.dataDir(), sv.port, sv.params, sv.logw, nil, startTimeout)
		if err == nil {
			sv.pm = pm
			return nil
		}
		retry := errors.Is(err, errPortTaken) || strings.Contains(err.Error(), "pre-existing shared memory block")
		if !retry || time.Now().After(deadline) {
			return fmt.Errorf("restarting PostgreSQL after the crash: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (sv *supervisor) dataDir() string { return filepath.Join(sv.slotDir, "data") }
func (sv *supervisor) tmpDir() string  { return filepath.Join(sv.slotDir, "tmp") }

// prepare does what every supervisor does before it starts a server: drop
// root, lock a slot, move into it, stop what a killed run left there, and
// find the binaries and the cluster's password.
func (sv *supervisor) prepare() (pw string, err error) {
	sv.root = filepath.Join(sv.cfg.CacheDir, fmt.Sprintf("pg%d", sv.cfg.Major))
	if err := sv.dropRoot(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(sv.root, 0o700); err != nil {
		return "", fmt.Errorf("cannot create cache dir %s as uid %d: %v; set BANK_SIM_CACHE_DIR to a writable directory", sv.root, os.Getuid(), err)
	}
	if err := sv.takeSlot(); err != nil {
		return "", err
	}
	// initdb and postgres resolve relative paths against the cwd, and it
	// must be a directory nobody can enter after the privilege drop.
	if err := os.Chdir(sv.slotDir); err != nil {
		return "", err
	}
	os.Setenv("HOME", sv.slotDir)
	// embedded-postgres leaves an embedded_postgres_log* file per start in
	// TMPDIR; keep them in the slot, where we can delete them.
	sv.cleanupTmp()
	if err := os.MkdirAll(sv.tmpDir(), 0o700); err != nil {
		return "", err
	}
	os.Setenv("TMPDIR", sv.tmpDir())

	sv.binPath = sv.cfg.Binaries
	if sv.cfg.Download {
		sv.binPath = filepath.Join(sv.root, "dist")
		if err := sv.fetch(); err != nil {
			return "", err
		}
	}

	return sv.password()
}

// baseParams are the server settings of every cluster bank-sim runs.
func baseParams(major int) map[string]string {
	params := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		// A simulator: durability against OS crashes is not needed, but
		// synchronous_commit stays on so that killing postgres itself
		// loses no acknowledged commit.
		"fsync":            "off",
		"full_page_writes": "off",
		// An audit runs cells side by side, each a bank's pools, and a
		// recycled bank keeps its idle connections for the next: the
		// chaos package's exhaustive run neared 200 (process titles)
		// and CI's "too many clients already". 400 costs 89 MB of shared
		// memory against 80 MB (shared_memory_size, 64 MB of buffers).
		"max_connections":   "400",
		"wal_level":         "minimal",
		"max_wal_senders":   "0",
		"jit":               "off",
		"shared_buffers":    "64MB",
		"log_min_messages":  "warning",
		"logging_collector": "off",
		// bank-sim replicates physically or not at all. Without logical
		// replication workers PostgreSQL forks no launcher for them: a
		// fork costs 40-70 ms of CPU on a virtual machine (measured), and
		// the tests start about a hundred clusters.
		"max_logical_replication_workers": "0",
	}
	if major >= 12 {
		// Same reasoning as fsync: a new WAL segment need not be 16 MB of
		// zeros written out first; PostgreSQL then makes it a sparse file.
		// A first run's CREATE DATABASEs fill most of a segment.
		params["wal_init_zero"] = "off"
	}
	return params
}

func (sv *supervisor) start(sigs chan os.Signal) (supStatus, error) {
	pw, err := sv.prepare()
	if err != nil {
		return supStatus{}, err
	}
	version := embeddedpostgres.PostgresVersion(sv.cfg.Version)
	sv.params = baseParams(sv.cfg.Major)
	sv.params["listen_addresses"] = strings.Join(append([]string{"127.0.0.1"}, sv.cfg.Listen...), ",")
	var lastErr error
	snapshotTried := false
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			return supStatus{}, fmt.Errorf("no free TCP port on 127.0.0.1: %v", err)
		}
		reused := dataDirValid(sv.dataDir(), version)
		unpacked := ""
		if !reused && !snapshotTried {
			snapshotTried = true
			name, err := sv.unpackSnapshot(sv.dataDir(), pw)
			switch {
			case err == nil:
				unpacked = name
			case !errors.Is(err, errNoSnapshot):
				fmt.Fprintf(sv.logw, "bank-sim: not using the snapshot, running initdb: %v\n", err)
			}
		}
		if !reused && unpacked == "" {
			if err := sv.initdb(sv.dataDir(), pw); err != nil {
				return supStatus{}, err
			}
		}
		if len(sv.cfg.Clients) > 0 {
			hba, err := sv.hbaWithClients(sv.dataDir())
			if err != nil {
				return supStatus{}, err
			}
			sv.params["hba_file"] = hba
		}
		pm, err := launchPostmaster(sv.binPath, sv.dataDir(), port, sv.params, sv.logw, sigs, startTimeout)
		if err == nil {
			sv.pm, sv.port = pm, port
			return supStatus{
				Port:          port,
				Slot:          sv.slot,
				SlotDir:       sv.slotDir,
				DataDir:       sv.dataDir(),
				Reused:        reused,
				Snapshot:      unpacked,
				Password:      pw,
				PostmasterPID: pm.pid,
			}, nil
		}
		lastErr = err
		if errors.Is(err, errPortTaken) {
			continue
		}
		if strings.Contains(err.Error(), "interrupted") {
			break
		}
		if unpacked != "" {
			// The server refused the snapshot's cluster: make one with
			// initdb instead (the next attempt; the snapshot is not retried).
			fmt.Fprintf(sv.logw, "bank-sim: PostgreSQL would not start the cluster unpacked from %s, running initdb: %v\n", unpacked, err)
			if err := stopStale(sv.dataDir()); err != nil {
				lastErr = err
				break
			}
			os.RemoveAll(sv.dataDir())
			continue
		}
		if !reused {
			break
		}
		// A reused data dir that does not start (half-written by a
		// killed initdb of an older bank-sim, say) is a cache entry:
		// start over with a fresh one.
		if err := stopStale(sv.dataDir()); err != nil {
			lastErr = err
			break
		}
		os.RemoveAll(sv.dataDir())
	}
	return supStatus{}, fmt.Errorf("starting PostgreSQL (%s) in %s: %v", sv.binPath, sv.slotDir, lastErr)
}

// fetch downloads and unpacks PostgreSQL into binPath with embedded-postgres
// (from Maven Central; the first run only). The library does that only as
// part of starting a cluster, through pg_ctl: it starts a scratch one and
// stops it at once; the server bank-sim runs is always its own child.
func (sv *supervisor) fetch() error {
	// Serialise downloads between concurrent supervisors.
	unlock, err := flockWait(filepath.Join(sv.root, "dist.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if hasPgCtl(sv.binPath) {
		return nil
	}
	scratch := filepath.Join(sv.slotDir, "fetch")
	if err := stopStale(filepath.Join(scratch, "data")); err != nil {
		return err
	}
	os.RemoveAll(scratch)
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(scratch)
		}
	}()
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("no free TCP port on 127.0.0.1: %v", err)
	}
	ep := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.PostgresVersion(sv.cfg.Version)).
		Port(uint32(port)).
		RuntimePath(filepath.Join(scratch, "run")).
		DataPath(filepath.Join(scratch, "data")).
		BinariesPath(sv.binPath).
		CachePath(filepath.Join(sv.root, "download")).
		Locale("C").
		Encoding("UTF8").
		Logger(sv.logw).
		StartParameters(map[string]string{"listen_addresses": "127.0.0.1", "unix_socket_directories": ""}))
	err = ep.Start()
	if err == nil {
		err = ep.Stop()
	}
	if serr := stopStale(filepath.Join(scratch, "data")); serr != nil {
		keep = true
		err = errors.Join(err, serr)
	}
	if !hasPgCtl(sv.binPath) {
		return fmt.Errorf("downloading PostgreSQL with embedded-postgres: %v", err)
	}
	return nil
}

// initdb initialises the cluster in dataDir itself (snapshot.InitdbArgs), when no
// snapshot fits or the server refused one. It builds it beside the data directory and renames it into place,
// so a killed initdb never leaves a half-made cluster under the real name.
func (sv *supervisor) initdb(dataDir, pw string) error {
	os.RemoveAll(dataDir)
	building := dataDir + ".initdb"
	os.RemoveAll(building)
	pwfile := filepath.Join(sv.tmpDir(), "pwfile")
	if err := os.WriteFile(pwfile, []byte(pw), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	cmd := exec.Command(filepath.Join(sv.binPath, "bin", "initdb"), snapshot.InitdbArgs(pwfile, building)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, sv.logw)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		os.RemoveAll(building)
		return fmt.Errorf("initdb (%s) failed: %v: %s", sv.binPath, err, strings.TrimSpace(out.String()))
	}
	return os.Rename(building, dataDir)
}

// dropRoot switches to nobody, because initdb and postgres refuse root.
// The cache root is created and handed over first, while we still can.
func (sv *supervisor) dropRoot() error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := procfs.Nobody()
	if err := os.MkdirAll(sv.cfg.CacheDir, 0o755); err != nil {
		return fmt.Errorf("cannot create cache dir %s: %v; set BANK_SIM_CACHE_DIR", sv.cfg.CacheDir, err)
	}
	if err := os.MkdirAll(sv.root, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %v; set BANK_SIM_CACHE_DIR", sv.root, err)
	}
	if err := os.Chown(sv.root, uid, gid); err != nil {
		return fmt.Errorf("cannot hand %s to nobody: %v", sv.root, err)
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %v", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid(%d): %v", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid(%d): %v", uid, err)
	}
	// Changing credentials clears the parent-death signal.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %v", errno)
	}
	if os.Getppid() != sv.cfg.ParentPID {
		return errors.New("parent exited during startup")
	}
	if _, err := os.Stat(sv.root); err != nil {
		return fmt.Errorf("user nobody cannot reach %s (%v): a parent directory is not searchable by others; set BANK_SIM_CACHE_DIR to a directory under a world-searchable path", sv.root, err)
	}
	return nil
}

// takeSlot locks the first free slot. The lock is held until we exit, so
// concurrent runs get separate clusters and a postmaster found in a slot we
// locked is an orphan of a killed run.
func (sv *supervisor) takeSlot() error {
	for n := 0; n < maxSlots; n++ {
		dir := filepath.Join(sv.root, fmt.Sprintf("slot-%d", n))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %v", dir, err)
		}
		f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("cannot open slot lock: %v", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return fmt.Errorf("cannot lock %s: %v", f.Name(), err)
		}
		sv.slot, sv.slotDir, sv.lock = n, dir, f
		// What a killed run left in the slot: a server, or a pair whose
		// postmasters died with their supervisor or are in their
		// immediate shutdown. One that cannot be stopped may still run on
		// the slot's clusters, which the run would start on, or remove:
		// the slot is left alone.
		err = errors.Join(stopStale(sv.dataDir()), sv.stopPair())
		if err == nil {
			return nil
		}
		fmt.Fprintf(sv.logw, "bank-sim: not using %s: %v\n", dir, err)
		sv.slot, sv.slotDir, sv.lock = 0, "", nil
		f.Close()
	}
	return fmt.Errorf("all %d cluster slots in %s are busy or left alone", maxSlots, sv.root)
}

func flockWait(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// password returns the cluster's superuser password, which is fixed at
// initdb; a data dir whose password was lost is unusable and is removed.
func (sv *supervisor) password() (string, error) {
	file := filepath.Join(sv.slotDir, "password")
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	os.RemoveAll(sv.dataDir())
	os.RemoveAll(sv.pairBaseDir()) // it has the old password too
	b := make([]byte, 16)
	rand.Read(b)
	pw := hex.EncodeToString(b)
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

func (sv *supervisor) stop() error {
	var errs []error
	// The standby first: stopped while its primary still runs, it need
	// not retry a connection to a primary that is going away. A pair's
	// servers stop at once: their clusters are never started again as
	// they are (the next pair's are made afresh over them), so a
	// shutdown checkpoint would be work thrown away.
	stop := func(pm *postmaster) error {
		if sv.cfg.Pair {
			return pm.quit()
		}
		return pm.stop(10 * time.Second)
	}
	if sv.standby != nil {
		errs = append(errs, stop(sv.standby))
		sv.standby = nil
	}
	if sv.pm != nil {
		errs = append(errs, stop(sv.pm))
		sv.pm = nil
	}
	if sv.cfg.Pair {
		errs = append(errs, sv.stopPair())
	}
	sv.cleanupTmp()
	return errors.Join(errs...)
}

func (sv *supervisor) cleanupTmp() {
	if sv.slotDir != "" {
		os.RemoveAll(sv.tmpDir())
	}
}

// reapOrphans stops postmasters that killed runs left in other, now
// unlocked, slots, so they do not linger until that slot is next used.
func (sv *supervisor) reapOrphans() {
	entries, _ := os.ReadDir(sv.root)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "slot-") || e.Name() == filepath.Base(sv.slotDir) {
			continue
		}
		dir := filepath.Join(sv.root, e.Name())
		dataDirs := append([]string{filepath.Join(dir, "data")}, pairDataDirs(dir)...)
		running := false
		for _, d := range dataDirs {
			running = running || readPidFile(d) != 0
		}
		if !running {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			for _, d := range dataDirs {
				if err := stopStale(d); err != nil {
					fmt.Fprintf(sv.logw, "bank-sim: %v\n", err)
				}
			}
		}
		f.Close()
	}
}

func dataDirValid(dataDir string, v embeddedpostgres.PostgresVersion) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return false
	}
	return strings.HasPrefix(string(v), strings.TrimSpace(string(b)))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
