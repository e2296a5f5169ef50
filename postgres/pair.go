package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
	"github.com/jackc/pgx/v5"
)

// A pair is a primary and a streaming standby, both started by one
// supervisor from the same binaries, for stories about failover. It lives
// in a slot like any embedded cluster (the slot's lock is held for its
// life), in the slot's "pair" directory, apart from the slot's own cluster:
// a pair's clusters are made afresh for every run and left, stopped, in
// the slot when it stops, for the next pair there to make afresh again at
// a fraction of the cost (refreshTree). A pair that a killed run left is
// stopped by the next supervisor to take the slot and by reapOrphans, and
// deleted by bank-sim prune, like a slot's own cluster.
//
// Both clusters are copies of one pristine cluster, "pair-base", made once
// per slot (the snapshot, or initdb) and never started: copied while no
// server runs on it, it is a base backup of a stopped server, which is
// what pg_basebackup makes of a running one, at a fraction of the cost (no
// checkpoint, no WAL streamed during the copy, no third process). The
// standby's copy gets what pg_basebackup -R would write: standby.signal,
// primary_conninfo and primary_slot_name; the primary gets the physical
// replication slot as soon as it runs, before anything is written, so the
// WAL from the copy's checkpoint on is kept for the standby however far it
// falls behind.
//
//	bank-sim ──▶ supervisor ──▶ primary postmaster  (127.0.0.1:P1)
//	                        └─▶ standby postmaster  (127.0.0.1:P2, streaming from P1
//	                                                 through replication slot bank_sim_standby)
//
// Both postmasters are the supervisor's children with a parent-death
// signal (postmaster.go), so nothing outlives bank-sim however it dies.
// Unlike a lone server, neither is restarted when it dies: the primary is
// killed on purpose (KillPrimary), and a standby that dies ends the pair
// (Lost).

const (
	pairDirName     = "pair"
	pairBaseDirName = "pair-base"
	// cmdKillPrimary asks a pair's supervisor to SIGKILL the primary.
	cmdKillPrimary = "kill-primary"
	// standbyName is the standby's application_name, which the primary's
	// synchronous_standby_names names when its commits wait for it.
	standbyName = "standby"
	// replicationSlot keeps on the primary every WAL segment the standby
	// has not received yet: however far behind it falls, it can catch up.
	replicationSlot = "bank_sim_standby"
)

// pairDataDirs are the data directories of a pair in the slot slotDir:
// the primary's and the standby's.
func pairDataDirs(slotDir string) []string {
	return []string{filepath.Join(slotDir, pairDirName, "primary"), filepath.Join(slotDir, pairDirName, "standby")}
}

// pairBaseDir is the slot's pristine cluster that a pair's are copied from.
func (sv *supervisor) pairBaseDir() string { return filepath.Join(sv.slotDir, pairBaseDirName) }

// stopPair stops what still runs of a pair in the slot. Its clusters
// stay: the next pair in the slot makes its own from them (refreshTree).
// The error says why a postmaster may still run on one (stopStale).
func (sv *supervisor) stopPair() error {
	if sv.slotDir == "" {
		return nil
	}
	var errs []error
	for _, d := range pairDataDirs(sv.slotDir) {
		errs = append(errs, stopStale(d))
	}
	return errors.Join(errs...)
}

// pairParams are a pair member's settings. Only the primary's commits wait
// for the standby (sync): a promoted standby has no standby of its own, and
// would wait forever for one.
func pairParams(major int, sync bool) map[string]string {
	p := baseParams(major)
	p["wal_level"] = "replica"
	// PostgreSQL's defaults: a standby refuses to run with less than the
	// primary had, and the copies' control file says the defaults (the
	// base's last server was initdb's or the password's single-user one).
	p["max_wal_senders"] = "10"
	p["max_replication_slots"] = "10"
	p["hot_standby"] = "on"
	// How soon a standby whose WAL receiver stopped (StopReceiving) or
	// was given its primary again (Receive) tries again: 5 s by default.
	p["wal_retrieve_retry_interval"] = "50ms"
	// A pair lives for seconds: its autovacuum launcher would be one more
	// fork (40-70 ms of CPU here, see baseParams) for each server, and
	// its workers more.
	p["autovacuum"] = "off"
	// A pair's bank is a few pages: the 64 MB of baseParams are page
	// faults in every process that maps them, for nothing.
	p["shared_buffers"] = "16MB"
	if sync {
		// remote_apply rather than on (remote flush): the story reads the
		// key on the standby before the primary dies, and finds it.
		p["synchronous_standby_names"] = standbyName
		p["synchronous_commit"] = "remote_apply"
	}
	return p
}

// supervisePair is the supervisor of a pair: it starts both servers,
// reports them, then runs the parent's commands until told to stop.
func (sv *supervisor) supervisePair(sigs chan os.Signal, out *json.Encoder) int {
	st, err := sv.startPair(sigs)
	if err != nil {
		out.Encode(supStatus{Error: err.Error()})
		if stopErr := sv.stop(); stopErr != nil {
			fmt.Fprintln(os.Stderr, "bank-sim postgres supervisor: stop:", stopErr)
		}
		return 1
	}
	if err := out.Encode(st); err != nil {
		sv.stop()
		return 1
	}
	go sv.reapOrphans()
	cmds, eof := readCommands()
	code := 0
	standbyDied := sv.standby.done
loop:
	for {
		select {
		case <-eof:
			break loop
		case <-sigs:
			break loop
		case <-sv.died():
			fmt.Fprintf(os.Stdout, "%s %s the primary (postmaster %d) %s without being asked to\n", eventPrefix, eventLost, sv.pm.pid, exitHow(sv.pm.err))
			sv.pm = nil
			code = 1
			break loop
		case <-standbyDied:
			fmt.Fprintf(os.Stdout, "%s %s the standby (postmaster %d) %s\n", eventPrefix, eventLost, sv.standby.pid, exitHow(sv.standby.err))
			sv.standby = nil
			code = 1
			break loop
		case c := <-cmds:
			switch c {
			case cmdKillPrimary:
				if err := sv.killPrimary(); err != nil {
					fmt.Fprintf(os.Stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				} else {
					fmt.Fprintln(os.Stdout, "ok")
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

// startPair copies the slot's pristine cluster twice (over the last
// pair's clusters, when it left them), starts the primary on one copy and,
// beside it, the other as a hot standby streaming from it, and gives the
// primary the standby's replication slot.
func (sv *supervisor) startPair(sigs chan os.Signal) (supStatus, error) {
	began := time.Now()
	pw, err := sv.prepare() // stops any pair a killed run left
	if err != nil {
		return supStatus{}, err
	}
	var steps []string
	step := func(what string) {
		steps = append(steps, fmt.Sprintf("%s %.2f s", what, time.Since(began).Seconds()))
		began = time.Now()
	}
	step("slot")
	dirs := pairDataDirs(sv.slotDir)
	primaryDir, standbyDir := dirs[0], dirs[1]
	if err := os.MkdirAll(filepath.Dir(primaryDir), 0o700); err != nil {
		return supStatus{}, err
	}
	unpacked, err := sv.ensurePairBase(pw)
	if err != nil {
		return supStatus{}, err
	}
	step("base")
	// Both at once: on two cores, half the time.
	copied := make(chan error, len(dirs))
	for _, d := range dirs {
		go func() { copied <- refreshTree(sv.pairBaseDir(), d) }()
	}
	var copyErrs []error
	for range dirs {
		copyErrs = append(copyErrs, <-copied)
	}
	if err := errors.Join(copyErrs...); err != nil {
		return supStatus{}, fmt.Errorf("copying the pair's cluster: %v", err)
	}
	step("copies")
	// The primary alone listens on the run's private network, if it has
	// one (Options.ListenAddresses): its standby may stream through it.
	primaryParams := pairParams(sv.cfg.Major, sv.cfg.Sync)
	primaryParams["listen_addresses"] = strings.Join(append([]string{"127.0.0.1"}, sv.cfg.Listen...), ",")
	if len(sv.cfg.Clients) > 0 {
		hba, err := sv.hbaWithClients(primaryDir)
		if err != nil {
			return supStatus{}, err
		}
		primaryParams["hba_file"] = hba
	}
	// The standby starts beside the primary rather than after it: it
	// needs nothing of the primary to open for reads (its copy ends at a
	// clean checkpoint), and its WAL receiver tries the primary again
	// every wal_retrieve_retry_interval until the primary and its slot
	// are there. The slot still comes before anything is written: no
	// checkpoint passes the copies' redo point first.
	var pm, standby *postmaster
	var port, standbyPort int
	for attempt := 0; ; attempt++ {
		port, err = freePort()
		if err != nil {
			return supStatus{}, fmt.Errorf("no free TCP port on 127.0.0.1: %v", err)
		}
		// Appended on each attempt: the last setting in the file wins.
		if err := configureStandby(standbyDir, port, pw); err != nil {
			return supStatus{}, err
		}
		var standbyErr error
		standbyDone := make(chan struct{})
		go func() {
			defer close(standbyDone)
			standby, standbyPort, standbyErr = launchOnFreePort(sv.binPath, standbyDir, pairParams(sv.cfg.Major, false), sv.logw, sigs)
		}()
		pm, err = launchPostmaster(sv.binPath, primaryDir, port, primaryParams, sv.logw, sigs, startTimeout)
		<-standbyDone
		if err == nil && standbyErr == nil {
			break
		}
		// Whichever started is stopped before trying again or failing.
		if standby != nil {
			standby.quit()
		}
		if pm != nil {
			pm.quit()
		}
		if errors.Is(err, errPortTaken) && standbyErr == nil && attempt < 3 {
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "interrupted") {
				// A base the server refuses is made again by the next run.
				os.RemoveAll(sv.pairBaseDir())
			}
			return supStatus{}, fmt.Errorf("starting the primary (%s) in %s: %v", sv.binPath, primaryDir, err)
		}
		return supStatus{}, fmt.Errorf("starting the standby (%s) in %s: %v", sv.binPath, standbyDir, standbyErr)
	}
	sv.pm, sv.port, sv.standby = pm, port, standby
	step("primary and standby")
	// StartPair gives the primary the standby's replication slot, on the
	// connection the pair keeps to it anyway (createSlot).
	return supStatus{
		Steps:         strings.Join(steps, ", "),
		Port:          port,
		Slot:          sv.slot,
		SlotDir:       sv.slotDir,
		DataDir:       primaryDir,
		Snapshot:      unpacked,
		Password:      pw,
		PostmasterPID: pm.pid,
		StandbyPort:   standbyPort,
		StandbyPID:    standby.pid,
		StandbyDir:    standbyDir,
	}, nil
}

// launchOnFreePort starts a postmaster on data on a free port, trying
// another when one is taken between the choice and the bind.
func launchOnFreePort(bin, data string, params map[string]string, logw io.Writer, sigs <-chan os.Signal) (*postmaster, int, error) {
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, 0, fmt.Errorf("no free TCP port on 127.0.0.1: %v", err)
		}
		pm, err := launchPostmaster(bin, data, port, params, logw, sigs, startTimeout)
		if err == nil {
			return pm, port, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, 0, lastErr
}

// ensurePairBase makes the slot's pristine pair cluster, if it has none
// that fits: from the snapshot, else with initdb; both build beside it and
// rename into place, so a killed run never leaves half a base. It returns
// the snapshot's name when it used one just now.
func (sv *supervisor) ensurePairBase(pw string) (string, error) {
	base := sv.pairBaseDir()
	if dataDirValid(base, embeddedpostgres.PostgresVersion(sv.cfg.Version)) {
		return "", nil
	}
	unpacked, err := sv.unpackSnapshot(base, pw)
	if err == nil {
		return unpacked, nil
	}
	if !errors.Is(err, errNoSnapshot) {
		fmt.Fprintf(sv.logw, "bank-sim: not using the snapshot, running initdb: %v\n", err)
	}
	return "", sv.initdb(base, pw)
}

// refreshTree makes dst a copy of the cluster in src, keeping
// permissions (PostgreSQL refuses a data directory others can read). It
// reuses what dst already holds, the copy a previous pair left: a file
// whose size and modification time are src's has not been written since
// it was copied (a copy takes its source's time, and PostgreSQL's every
// write sets the time to now), so it stays; every other file is copied
// again in place, and what src lacks is removed. Creating files is most
// of a fresh copy's cost (on ext4, finding inodes for a thousand files
// just after a thousand were deleted): a pair's servers write to a few
// dozen of the base's files, so the next pair rewrites those and
// creates none.
func refreshTree(src, dst string) error {
	want := map[string]bool{}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		want[rel] = true
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		have, haveErr := os.Lstat(target)
		switch {
		case d.IsDir():
			if haveErr == nil && have.IsDir() {
				return nil
			}
			if haveErr == nil {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
			}
			return os.Mkdir(target, info.Mode().Perm())
		case d.Type().IsRegular():
			if haveErr == nil && have.Mode().IsRegular() && have.Size() == info.Size() && have.ModTime().Equal(info.ModTime()) {
				return nil
			}
			if haveErr == nil && !have.Mode().IsRegular() {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
			}
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(target, info.ModTime(), info.ModTime())
		}
		return fmt.Errorf("%s: not a file or directory", path)
	})
	if err != nil {
		return err
	}
	// What the last pair's servers made: databases, WAL segments, the
	// slot, standby.signal, postmaster.pid.
	return filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dst, path)
		if err != nil {
			return err
		}
		if want[rel] {
			return nil
		}
		if err := os.RemoveAll(path); err != nil {
			return err
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
}

// copyFile copies src to dst, over what dst held, leaving holes where
// src has whole blocks of zeros: most of a fresh cluster's bytes are its
// first WAL segment's zeros, which PostgreSQL reads back from a hole just
// the same (it makes new segments that way itself, with wal_init_zero
// off).
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	var size int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if allZero(buf[:n]) {
				_, err = out.Seek(int64(n), io.SeekCurrent)
			} else {
				_, err = out.Write(buf[:n])
			}
			if err != nil {
				out.Close()
				return err
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	// A file that ends in a hole gets its length here.
	if err := out.Truncate(size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// zeros is what allZero compares with: a 16 MB WAL segment is checked in
// a few milliseconds rather than byte by byte.
var zeros = make([]byte, 64<<10)

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// createSlot creates the physical replication slot the standby streams
// through, on the primary, reserving WAL at once: from the redo point of
// the checkpoint both copies start from, which no checkpoint has passed
// yet, and nothing has been written since the primary started. The
// standby's WAL receiver, started beside the primary, finds it on one of
// its retries.
func (p *Pair) createSlot(ctx context.Context) error {
	return p.OnPrimary(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", replicationSlot); err != nil {
			return fmt.Errorf("creating the replication slot on the primary: %w", err)
		}
		return nil
	})
}

// configureStandby makes the cluster in dir a standby of the primary on
// port, as pg_basebackup -R does: standby.signal, and primary_conninfo and
// primary_slot_name in postgresql.auto.conf (where ALTER SYSTEM can change
// them: StopReceiving does). The connection is a replication one as the
// cluster's superuser, over TCP with the password, which initdb's
// pg_hba.conf allows from 127.0.0.1.
func configureStandby(dir string, port int, pw string) error {
	if err := os.WriteFile(filepath.Join(dir, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.auto.conf"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s application_name=%s sslmode=disable", port, pw, standbyName)
	_, err = fmt.Fprintf(f, "primary_conninfo = %s\nprimary_slot_name = %s\n", quoteLiteral(conninfo), quoteLiteral(replicationSlot))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// killPrimary kills the primary's postmaster with SIGKILL, as a machine
// that loses power would stop it: no shutdown, no last WAL sent. It returns
// once it and its children are gone.
func (sv *supervisor) killPrimary() error {
	kids, err := sv.killPostmaster("the primary")
	if err != nil {
		return err
	}
	// Its backends and WAL sender notice their postmaster's death and exit
	// by themselves, at once; one that does not is killed.
	if !reap(kids) {
		return fmt.Errorf("the primary's processes %v survived SIGKILL for 5 s", kids)
	}
	return nil
}

// PairOptions choose how a pair replicates.
type PairOptions struct {
	// Sync makes every commit on the primary wait until the standby has
	// applied it (synchronous_standby_names = the standby,
	// synchronous_commit = remote_apply); otherwise the primary
	// acknowledges a commit as soon as its own WAL has it (asynchronous
	// replication, PostgreSQL's default).
	Sync bool
}

// Pair is a running primary and its streaming standby (see the top of
// this file). Every method that waits is bounded by its context.
type Pair struct {
	srv         *Server // the supervisor; its admin connections reach the primary
	password    string
	primaryPort int
	standbyPort int
	primaryPID  int
	standbyPID  int
	sync        bool
	conninfo    string // the standby's primary_conninfo, kept while it is cleared
	primary     adminConn
	standby     adminConn
}

// adminConn is the pair's own connection to database postgres on one of
// its servers, opened on first use and kept for the pair's life: each new
// connection forks a backend (40-70 ms of CPU on a virtual machine, see
// baseParams), and a failover story asks the standby five times.
type adminConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// with runs f on the server's admin connection, opening it (again, after
// one that broke) to url first. name says which server, for errors.
func (a *adminConn) with(ctx context.Context, url, name string, f func(*pgx.Conn) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil || a.conn.IsClosed() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return unavailable("connecting to the %s: %v", name, err)
		}
		a.conn = conn
	}
	return f(a.conn)
}

func (a *adminConn) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.conn.Close(ctx)
		cancel()
		a.conn = nil
	}
}

// OnPrimary runs f on the pair's own connection to database postgres on
// the primary, one caller at a time.
func (p *Pair) OnPrimary(ctx context.Context, f func(*pgx.Conn) error) error {
	return p.primary.with(ctx, p.PrimaryURL("postgres"), "primary", f)
}

// OnStandby runs f on the pair's own connection to database postgres on
// the standby, one caller at a time.
func (p *Pair) OnStandby(ctx context.Context, f func(*pgx.Conn) error) error {
	return p.standby.with(ctx, p.StandbyURL("postgres"), "standby", f)
}

// StartPair starts a primary and a standby that streams from it, from the
// same binaries as Start would use (o.URL must be empty: only a pair that
// bank-sim runs itself can be failed over). It returns once the standby
// accepts read-only connections; the caller must Close the pair, and if it
// cannot (panic, signal, SIGKILL) both servers stop by themselves.
func StartPair(ctx context.Context, o Options, po PairOptions) (*Pair, error) {
	if o.URL != "" {
		return nil, unavailable("a primary and standby pair is always bank-sim's own: it cannot use --database-url / DATABASE_URL")
	}
	if os.Getenv(envSupervisor) != "" {
		return nil, unavailable("%s is set but MaybeSupervise was not called first thing in main/TestMain", envSupervisor)
	}
	if !superviseCalled.Load() {
		return nil, unavailable("postgres.MaybeSupervise must be called first thing in main() and in TestMain (pgtest.Run does it)")
	}
	began := time.Now()
	s, st, bin, err := spawnSupervisor(ctx, o, supMode{Pair: true, Sync: po.Sync})
	if err != nil {
		return nil, err
	}
	p := &Pair{srv: s, password: st.Password, primaryPort: st.Port, standbyPort: st.StandbyPort,
		primaryPID: st.PostmasterPID, standbyPID: st.StandbyPID, sync: po.Sync}
	slotBegan := time.Now()
	if err := p.createSlot(ctx); err != nil {
		p.Close()
		return nil, err
	}
	repl := "asynchronous"
	if po.Sync {
		repl = "synchronous (remote_apply)"
	}
	s.desc = fmt.Sprintf("embedded PostgreSQL pair (%s): primary on 127.0.0.1:%d, streaming standby on 127.0.0.1:%d, %s replication, slot %d, ready in %.2f s (%s, replication slot %.2f s)",
		bin.path, st.Port, st.StandbyPort, repl, st.Slot, time.Since(began).Seconds(), st.Steps, time.Since(slotBegan).Seconds())
	return p, nil
}

// Describe is a one-line description of the pair, without credentials.
func (p *Pair) Describe() string { return p.srv.desc }

// Ports are the primary's and the standby's TCP ports on 127.0.0.1.
func (p *Pair) Ports() (primary, standby int) { return p.primaryPort, p.standbyPort }

// PIDs are the primary's and the standby's postmasters' process ids.
func (p *Pair) PIDs() (primary, standby int) { return p.primaryPID, p.standbyPID }

// Sync reports whether the primary's commits wait for the standby.
func (p *Pair) Sync() bool { return p.sync }

// URL connects to database db on whichever of the two is the read-write
// one, as an application in production does: a multi-host connection
// string that tries the primary, then the standby, and takes the first
// that accepts writes (target_session_attrs=read-write). Before a failover
// that is the primary; after it, the promoted standby.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres password=%s dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=5",
		p.primaryPort, p.standbyPort, p.password, db)
}

// PrimaryURL connects to db on the primary only.
func (p *Pair) PrimaryURL(db string) string { return p.nodeURL(p.primaryPort, db) }

// StandbyURL connects to db on the standby only (read-only until promoted).
func (p *Pair) StandbyURL(db string) string { return p.nodeURL(p.standbyPort, db) }

func (p *Pair) nodeURL(port int, db string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", p.password, port, db)
}

// CreateDatabase creates database name on the primary and fills it with
// tpl.Init; the standby receives it as it receives everything else. No
// marker is needed: the pair's clusters are made afresh for every pair.
func (p *Pair) CreateDatabase(ctx context.Context, name string, tpl Template) error {
	if err := p.exec(ctx, p.PrimaryURL("postgres"), "CREATE DATABASE "+quote(name)); err != nil {
		return fmt.Errorf("creating %s on the primary: %w", name, err)
	}
	return p.Fill(ctx, name, tpl)
}

// Fill fills database name, which exists on the primary (postgres
// always does), with tpl.Init. A story that needs one database fills
// postgres rather than create one: CREATE DATABASE copies template1
// through the WAL, which the standby replays too.
func (p *Pair) Fill(ctx context.Context, name string, tpl Template) error {
	fill := func(conn *pgx.Conn) error {
		if err := tpl.Init(ctx, conn); err != nil {
			return fmt.Errorf("filling %s on the primary: %w", name, err)
		}
		return nil
	}
	if name == "postgres" {
		return p.OnPrimary(ctx, fill)
	}
	conn, err := pgx.Connect(ctx, p.PrimaryURL(name))
	if err != nil {
		return unavailable("connecting to %s on the primary: %v", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fill(conn)
}

// exec runs statements on a connection of their own to url.
func (p *Pair) exec(ctx context.Context, url string, sql ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return unavailable("%v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range sql {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// poll runs check every few milliseconds until it reports done, fails, or
// ctx ends; what says what it waited for.
func poll(ctx context.Context, what string, check func(context.Context) (bool, error)) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := check(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// WaitReplayed returns once the standby has replayed everything the
// primary had written when it was called.
func (p *Pair) WaitReplayed(ctx context.Context) error {
	var lsn string
	if err := p.OnPrimary(ctx, func(primary *pgx.Conn) error {
		if err := primary.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return fmt.Errorf("reading the primary's WAL position: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	return p.OnStandby(ctx, func(standby *pgx.Conn) error {
		return poll(ctx, "the standby to replay the primary's WAL up to "+lsn, func(ctx context.Context) (bool, error) {
			var ok bool
			err := standby.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&ok)
			return ok, err
		})
	})
}

// StopReceiving stops the standby's WAL receiver and returns once it is
// gone: from then on nothing the primary writes reaches the standby, until
// Receive. It is how a story makes "the standby had not received it yet"
// certain rather than a race: a standby normally lags by a few
// milliseconds, and by seconds when the network or the standby is slow.
//
// Pausing replay (pg_wal_replay_pause) would not do: the receiver would
// still receive and flush the WAL, and promotion replays what was
// received. So the standby is told to forget its primary instead:
// primary_conninfo is cleared (ALTER SYSTEM, a reload), on which the
// startup process stops the WAL receiver and, with nowhere to stream from,
// starts none. pg_stat_wal_receiver has no row once it has exited.
func (p *Pair) StopReceiving(ctx context.Context) error {
	return p.OnStandby(ctx, func(conn *pgx.Conn) error {
		if p.conninfo == "" {
			if err := conn.QueryRow(ctx, "SHOW primary_conninfo").Scan(&p.conninfo); err != nil {
				return err
			}
			if p.conninfo == "" {
				return errors.New("the standby has no primary_conninfo to clear")
			}
		}
		for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("on the standby: %s: %w", q, err)
			}
		}
		return poll(ctx, "the standby's WAL receiver to stop", func(ctx context.Context) (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n)
			return n == 0, err
		})
	})
}

// Receive gives the standby its primary again after StopReceiving, and
// returns once its WAL receiver streams.
func (p *Pair) Receive(ctx context.Context) error {
	if p.conninfo == "" {
		return errors.New("the standby was not stopped from receiving")
	}
	return p.OnStandby(ctx, func(conn *pgx.Conn) error {
		for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = " + quoteLiteral(p.conninfo), "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("on the standby: ALTER SYSTEM SET primary_conninfo / reload: %w", err)
			}
		}
		return poll(ctx, "the standby's WAL receiver to stream again", func(ctx context.Context) (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'").Scan(&n)
			return n > 0, err
		})
	})
}

// KillPrimary kills the primary's postmaster with SIGKILL and returns once
// it and its backends are gone. Connections to it break; a pool on URL
// reconnects, to the standby once it is promoted.
func (p *Pair) KillPrimary(ctx context.Context) error {
	_, err := p.srv.command(ctx, cmdKillPrimary, "kill the primary")
	return err
}

// Promote makes the standby a primary (pg_promote, as pg_ctl promote
// does) and returns once it accepts writes. What it had received is
// replayed first; anything the old primary committed that never reached
// it is gone.
func (p *Pair) Promote(ctx context.Context) error {
	return p.OnStandby(ctx, func(conn *pgx.Conn) error {
		// Without waiting: pg_promote's own wait checks ten times a second,
		// which would be most of a failover's time here.
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_promote(false)").Scan(&ok); err != nil {
			return fmt.Errorf("promoting the standby: %w", err)
		}
		if !ok {
			return errors.New("promoting the standby: pg_promote could not signal the postmaster")
		}
		return poll(ctx, "the promoted standby to leave recovery", func(ctx context.Context) (bool, error) {
			var recovering bool
			err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
			return !recovering, err
		})
	})
}

// FailoverTimes are how long a failover's steps took.
type FailoverTimes struct {
	Kill      time.Duration // SIGKILL until the primary and its backends are gone
	Promote   time.Duration // pg_promote until the standby accepts writes
	Reconnect time.Duration // until a new connection on URL is read-write
	Total     time.Duration
}

// Failover kills the primary, promotes the standby, and returns once a
// new connection through URL(db) lands on the promoted standby, read-write:
// the whole outage an application sees, in three steps.
func (p *Pair) Failover(ctx context.Context, db string) (FailoverTimes, error) {
	var t FailoverTimes
	began := time.Now()
	if err := p.KillPrimary(ctx); err != nil {
		return t, err
	}
	t.Kill = time.Since(began)
	if err := p.Promote(ctx); err != nil {
		return t, err
	}
	t.Promote = time.Since(began) - t.Kill
	port, err := p.ServingPort(ctx, db)
	if err != nil {
		return t, err
	}
	if port != p.standbyPort {
		return t, fmt.Errorf("after the failover, %s reached 127.0.0.1:%d, not the promoted standby on %d", "the multi-host URL", port, p.standbyPort)
	}
	t.Total = time.Since(began)
	t.Reconnect = t.Total - t.Kill - t.Promote
	return t, nil
}

// ServingPort connects through URL(db), checks the session accepts writes
// and returns the port of the server it landed on.
func (p *Pair) ServingPort(ctx context.Context, db string) (int, error) {
	conn, err := pgx.Connect(ctx, p.URL(db))
	if err != nil {
		return 0, unavailable("no read-write server through the multi-host URL: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var port int
	var readOnly string
	if err := conn.QueryRow(ctx, "SELECT inet_server_port(), current_setting('transaction_read_only')").Scan(&port, &readOnly); err != nil {
		return 0, err
	}
	if readOnly != "off" {
		return 0, fmt.Errorf("the multi-host URL landed on 127.0.0.1:%d, which is read-only", port)
	}
	return port, nil
}

// Lost is closed if the pair's supervisor exits before Close: a member
// died without being asked to (LostReason says which).
func (p *Pair) Lost() <-chan struct{} { return p.srv.Lost() }

// LostReason says why Lost was closed.
func (p *Pair) LostReason() string { return p.srv.LostReason() }

// Close stops both servers (whichever still run) and deletes their
// clusters. It is idempotent.
func (p *Pair) Close() error {
	p.standby.close()
	p.primary.close()
	return p.srv.Close()
}

// ReceiveFrom points the standby's WAL receiver at host:port instead of
// the primary's 127.0.0.1 (primary_conninfo, ALTER SYSTEM and a reload),
// and returns once it streams from there: a relay of the run's own in a
// network namespace, whose link a partition cuts (the primary must listen
// on the run's network and take replication from it:
// Options.ListenAddresses and AllowClients).
func (p *Pair) ReceiveFrom(ctx context.Context, host string, port int) error {
	return p.OnStandby(ctx, func(conn *pgx.Conn) error {
		conninfo := fmt.Sprintf("host=%s port=%d user=postgres password=%s application_name=%s sslmode=disable", host, port, p.password, standbyName)
		for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = " + quoteLiteral(conninfo), "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("on the standby: ALTER SYSTEM SET primary_conninfo / reload: %w", err)
			}
		}
		p.conninfo = conninfo
		return poll(ctx, fmt.Sprintf("the standby's WAL receiver to stream from %s:%d", host, port), func(ctx context.Context) (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming' AND sender_host = $1 AND sender_port = $2", host, port).Scan(&n)
			return n > 0, err
		})
	})
}
