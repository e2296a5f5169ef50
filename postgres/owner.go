package postgres

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// How bank-sim tells its leftovers from databases in use, on a server that
// is not its own (and on its own too):
//
// First, bank-sim touches only databases it can prove it created: those
// whose comment carries its marker (marker.go). A name proves nothing.
//
// Then, among those, it tells the ones in use from the leftovers of runs
// that have ended. Every Server takes a random 63-bit key and holds a
// session-level advisory lock on it, on a connection kept for that purpose,
// for as long as it runs. PostgreSQL releases the lock the moment that
// session ends, whatever ends it: Close, exit, panic, SIGKILL, a crash of
// the host (once TCP notices). Every database the Server creates has the
// key in its name, bank_sim_<key as 16 hex digits>_…
//
// A marked database whose key no session holds (pg_locks, which shows the
// advisory locks of every database to every user) belongs to a process that
// has ended: it is an orphan, and the next Start on that server, or bank-sim
// prune, drops it. This works across hosts and processes, with no pid or
// host name to guess. An orphan is dropped without FORCE, so one that anyone
// is still connected to stays; databases without the marker (a user's own
// bank_sim_foo or bank_sim_0123456789abcdef_prod, one left by an older
// bank-sim) are never dropped by bank-sim, but for one whose run was killed
// between its CREATE DATABASE and its COMMENT, which the run's template
// names (pending.go).

// owner is a Server's advisory lock.
type owner struct {
	key uint64
	hex string
	url string

	mu   sync.Mutex
	conn *pgx.Conn
}

// markedRE matches the names of databases that carry an owner's key.
var markedRE = regexp.MustCompile(`^bank_sim_([0-9a-f]{16})_`)

// ownerOf returns the key in a database's name, if it has one.
func ownerOf(name string) (key uint64, ok bool) {
	m := markedRE.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	k, err := strconv.ParseUint(m[1], 16, 64)
	return k, err == nil
}

func newOwner(ctx context.Context, url string) (*owner, error) {
	for range 3 {
		var b [8]byte
		rand.Read(b[:])
		// Kept below 2^63 so that it is the same number as a bigint.
		key := binary.BigEndian.Uint64(b[:]) &^ (1 << 63)
		if key == 0 {
			continue
		}
		o := &owner{key: key, hex: fmt.Sprintf("%016x", key), url: url}
		err := o.lock(ctx)
		if errors.Is(err, errKeyTaken) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return o, nil
	}
	return nil, errors.New("could not find a free advisory lock key for this run")
}

var errKeyTaken = errors.New("advisory lock key held by another session")

// lock connects and takes the lock.
func (o *owner) lock(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(o.url)
	if err != nil {
		return err
	}
	// Shown in pg_stat_activity, for whoever wonders whose session it is.
	cfg.RuntimeParams["application_name"] = "bank-sim owner " + o.hex
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(o.key)).Scan(&got); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	if !got {
		conn.Close(context.WithoutCancel(ctx))
		return errKeyTaken
	}
	o.conn = conn
	return nil
}

// ensure checks that the lock is still held before something is created
// under its key, and takes it again if its connection was lost (a restart
// of the server, or Crash). While it was lost, only a database nobody is
// connected to could have been taken for an orphan.
func (o *owner) ensure(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil && !o.conn.IsClosed() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := o.conn.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		o.conn.Close(context.WithoutCancel(ctx))
	}
	o.conn = nil
	if err := o.lock(ctx); err != nil {
		return fmt.Errorf("taking this run's advisory lock again: %w", err)
	}
	return nil
}

// release ends the lock's session: from then on the Server's databases,
// if any are left, are orphans.
func (o *owner) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		o.conn.Close(ctx)
		cancel()
		o.conn = nil
	}
}

// name returns a database name marked with this owner: bank_sim_<key>_<rest>.
func (o *owner) name(rest string) string { return "bank_sim_" + o.hex + "_" + rest }

// comment describes a database this owner creates, for whoever lists the
// databases of the server; mark appends the marker to it.
func (o *owner) comment() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("created by bank-sim (pid %d on %s, advisory lock %d); bank-sim drops it when it no longer needs it, "+
		"and if the run was killed, the next bank-sim run on this server or `bank-sim prune` drops it", os.Getpid(), host, o.key)
}

// LeftoverState says what bank-sim may do with a bank_sim_* database.
type LeftoverState int

const (
	// Orphan: marked by a bank-sim process that has ended, nobody connected.
	// Start and prune drop it.
	Orphan LeftoverState = iota
	// OrphanInUse: its bank-sim process has ended, but sessions are still
	// connected to it. Kept.
	OrphanInUse
	// Live: the bank-sim process that made it is running. Kept.
	Live
	// Unmarked: without bank-sim's marker (marker.go): a user's own, an
	// older bank-sim's, whatever its name. Never dropped by bank-sim.
	Unmarked
)

// Leftover is a database whose name starts with bank_sim_.
type Leftover struct {
	Name     string
	Template bool
	Bytes    int64 // -1 when the server would not say
	Sessions int   // other sessions connected to it
	State    LeftoverState
	// Pending: it has no marker, but the template of its ended run named
	// it as being created (pending.go): the run was killed during its
	// CREATE DATABASE.
	Pending bool
	// Dropped is set once it has been dropped; Err when dropping failed.
	Dropped bool
	Err     error
}

// leftoverRow is a Leftover as read, with what decides its state.
type leftoverRow struct {
	Leftover
	marked  bool
	comment string
}

// readLeftovers reads the databases that cond (on pg_database d, with
// args) selects, in name order.
func readLeftovers(ctx context.Context, conn *pgx.Conn, cond string, args ...any) ([]leftoverRow, error) {
	rows, err := conn.Query(ctx, `
		SELECT d.datname, d.datistemplate AND d.datconnlimit <> -2, -- an invalid one is only dropped
		       CASE WHEN has_database_privilege(d.datname, 'CONNECT') THEN pg_database_size(d.oid) ELSE -1 END,
		       (SELECT count(*) FROM pg_stat_activity a WHERE a.datid = d.oid AND a.pid <> pg_backend_pid()),
		       d.oid, coalesce(shobj_description(d.oid, 'pg_database'), '')
		FROM pg_database d
		WHERE `+cond+`
		ORDER BY d.datname`, args...)
	if err != nil {
		return nil, err
	}
	var found []leftoverRow
	for rows.Next() {
		var l leftoverRow
		var sessions int64
		var oid uint32
		if err := rows.Scan(&l.Name, &l.Template, &l.Bytes, &sessions, &oid, &l.comment); err != nil {
			rows.Close()
			return nil, err
		}
		l.Sessions = int(sessions)
		l.marked = marked(oid, l.comment)
		found = append(found, l)
	}
	return found, rows.Err()
}

// listLeftoversNamed reads the database name, if there is one.
func listLeftoversNamed(ctx context.Context, conn *pgx.Conn, name string) ([]leftoverRow, error) {
	return readLeftovers(ctx, conn, "d.datname = $1", name)
}

// listLeftovers reads every bank_sim_* database and decides what it is. It
// also returns the names that the templates of ended runs list as being
// created (pending.go), each with its template, whether or not a database
// of that name exists yet.
func listLeftovers(ctx context.Context, conn *pgx.Conn) ([]Leftover, map[string]string, error) {
	rows, err := readLeftovers(ctx, conn, `d.datname LIKE 'bank\_sim\_%'`)
	if err != nil {
		return nil, nil, err
	}
	held, err := heldKeys(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	pending := map[string]string{}
	for _, r := range rows {
		key, named := ownerOf(r.Name)
		if !r.marked || !named || held[key] || !r.Template {
			continue
		}
		for _, n := range pendingIn(r.comment) {
			// Only names under the template's own key: a run creates
			// nothing under another's.
			if k, ok := ownerOf(n); ok && k == key {
				pending[n] = r.Name
			}
		}
	}
	for _, n := range recordedPending() {
		if k, _ := ownerOf(n); !held[k] {
			if _, named := pending[n]; !named {
				pending[n] = recordedHere
			}
		}
	}
	found := make([]Leftover, len(rows))
	for i, r := range rows {
		l := r.Leftover
		key, named := ownerOf(l.Name)
		_, isPending := pending[l.Name]
		switch {
		case !r.marked && isPending:
			l.Pending = true
			l.State = Orphan
			if l.Sessions > 0 {
				l.State = OrphanInUse
			}
		case !r.marked || !named:
			l.State = Unmarked
		case held[key]:
			l.State = Live
		case l.Sessions > 0:
			l.State = OrphanInUse
		default:
			l.State = Orphan
		}
		found[i] = l
	}
	return found, pending, nil
}

// dropOrphans drops the orphans among found, and then the databases that
// the templates of ended runs named as being created (pending.go), once
// their templates are gone; it returns found, with what was done.
func dropOrphans(ctx context.Context, conn *pgx.Conn, found []Leftover, pending map[string]string, dryRun bool) []Leftover {
	dropped := map[string]bool{}
	for i := range found {
		if !dryRun && found[i].State == Orphan && !found[i].Pending {
			dropOrphan(ctx, conn, &found[i])
			dropped[found[i].Name] = found[i].Dropped
		}
	}
	at := map[string]int{}
	for i, l := range found {
		at[l.Name] = i
	}
	for _, l := range dropPending(ctx, conn, pending, dropped, dryRun) {
		if i, ok := at[l.Name]; ok {
			found[i] = l
		} else {
			found = append(found, l)
		}
	}
	for i := range found {
		l := &found[i]
		if !dryRun && l.Pending && l.State == Orphan && !l.Dropped && l.Err == nil {
			l.Err = fmt.Errorf("kept until the template %s, which names it, can be dropped", pending[l.Name])
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	return found
}

// heldKeys returns the keys of every granted single-bigint advisory lock
// in the cluster: pg_locks shows such a key as its high half in classid and
// its low half in objid, with objsubid 1.
func heldKeys(ctx context.Context, conn *pgx.Conn) (map[uint64]bool, error) {
	rows, err := conn.Query(ctx, `SELECT classid, objid FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted`)
	if err != nil {
		return nil, err
	}
	held := map[uint64]bool{}
	for rows.Next() {
		var hi, lo uint32
		if err := rows.Scan(&hi, &lo); err != nil {
			rows.Close()
			return nil, err
		}
		held[uint64(hi)<<32|uint64(lo)] = true
	}
	return held, rows.Err()
}

// dropOrphan drops an orphan, without FORCE: if anyone connected to it
// since it was listed, PostgreSQL refuses (55006) and it stays. Like every
// drop, it checks bank-sim's marker first (dropOurs).
func dropOrphan(ctx context.Context, conn *pgx.Conn, l *Leftover) {
	if err := dropOurs(ctx, conn, l.Name, false); err != nil {
		l.Err = explainDrop(err)
		return
	}
	l.Dropped = true
}

func explainDrop(err error) error {
	switch {
	case isCode(err, "55006"):
		return fmt.Errorf("someone connected to it: %w", err)
	case isCode(err, "42501"):
		return fmt.Errorf("only its owner or a superuser may drop it: %w", err)
	}
	return err
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// sweepOrphans drops the orphans on the server and returns how many it
// dropped. Errors are not fatal to a run: what cannot be dropped now is
// tried again next time, and bank-sim prune reports it.
func sweepOrphans(ctx context.Context, conn *pgx.Conn) int {
	found, pending, err := listLeftovers(ctx, conn)
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range dropOrphans(ctx, conn, found, pending, false) {
		if l.Dropped {
			n++
		}
	}
	return n
}
