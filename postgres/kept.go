package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kept databases: an embedded cluster keeps, between runs, the databases a
// run has finished with and reset, so that the next run in its slot starts
// with them instead of cloning its template again (a CREATE DATABASE is two
// checkpoints and a copy of the template's files: 100–900 ms measured here,
// its DROP 10–190 ms, against a few milliseconds for two renames).
//
// A kept database is only ever clean: the caller resets it before Keep, and
// Keep renames it into the kept names only then, once nobody is connected.
// TakeKept renames it back to an ordinary name of this process (owner.go)
// before anyone connects, so a database in use never has a kept name: if
// the run is killed, the next start drops it like any other leftover. Only
// one process uses an embedded cluster at a time (its slot is locked), so
// no two runs can take the same one. A server at --database-url never keeps
// anything: Keep drops there.

// keptPrefix starts the names of kept databases: bank_sim_kept_<version>_<hex>.
const keptPrefix = "bank_sim_kept_"

// MaxKept is how many databases of one template version an embedded cluster
// keeps; Keep drops the others.
const MaxKept = 8

func keptPrefixOf(version string) string { return keptPrefix + ident(version, 24) + "_" }

// TakeKept returns a kept database cloned from tpl, renamed for this
// process under label as CreateDatabase would name it, or nil when there
// is none (or the server is not embedded). It is in the state its last
// user reset it to.
func (s *Server) TakeKept(ctx context.Context, tpl Template, label string) (*Database, error) {
	if !s.embedded || tpl.Version == "" {
		return nil, nil
	}
	if err := s.owner.ensure(ctx); err != nil {
		return nil, unavailable("%s: %v", s.desc, err)
	}
	conn, err := s.admin(ctx)
	if err != nil {
		return nil, unavailable("connecting to %s: %v", s.desc, err)
	}
	// One taker at a time: a rename moves the database out of sight of the
	// next.
	s.keptMu.Lock()
	defer s.keptMu.Unlock()
	found, err := listDatabases(ctx, conn, "starts_with(d.datname, $1) AND NOT d.datistemplate AND d.datconnlimit <> -2", keptPrefixOf(tpl.Version))
	if err != nil {
		s.release(conn, err)
		return nil, fmt.Errorf("postgres: looking for a kept database: %w", err)
	}
	kept := ""
	for _, r := range found {
		if r.Ours() { // a look-alike is not bank-sim's to take (marker.go)
			kept = r.Name
			break
		}
	}
	if kept == "" {
		s.release(conn, nil)
		return nil, nil
	}
	name := s.owner.name(ident(label, 63-len(s.owner.name(""))-1-8) + "_" + randHex(4))
	err = alterOurs(ctx, conn, kept, "RENAME TO "+quote(name))
	s.release(conn, err)
	if err != nil {
		// Someone is connected to it, say: leave it, clone instead.
		return nil, nil
	}
	return &Database{Name: name, URL: s.dbURL(name), srv: s, version: tpl.Version}, nil
}

// keptBackendsWait bounds how long Keep waits for the backends of a closed
// pool to exit: they do so a moment after their client has gone.
const keptBackendsWait = 5 * time.Second

// Keep gives the database back to an embedded cluster for a later run, or
// drops it (on a server at --database-url, or when MaxKept are kept
// already, or when it cannot be renamed). The caller must have reset it to
// its template's opening state and closed every connection to it.
func (d *Database) Keep(ctx context.Context) error {
	s := d.srv
	if !s.embedded || d.version == "" {
		return d.Drop(ctx)
	}
	conn, err := s.admin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: keeping %s: %w", d.Name, err)
	}
	prefix := keptPrefixOf(d.version)
	// Only bank-sim's own count: a look-alike, or an older bank-sim's
	// unmarked one, is never taken, so it must not take a place either.
	kept := 0
	found, err := listDatabases(ctx, conn, "starts_with(d.datname, $1)", prefix)
	for _, r := range found {
		if r.Ours() {
			kept++
		}
	}
	if err == nil && kept < MaxKept {
		if err = waitDisconnected(ctx, conn, d.Name); err == nil {
			err = alterOurs(ctx, conn, d.Name, "RENAME TO "+quote(prefix+randHex(4)))
		}
		if err == nil {
			s.release(conn, nil)
			return nil
		}
	}
	s.release(conn, err)
	return d.Drop(ctx)
}

// waitDisconnected waits until no session is connected to name: a closed
// pool's backends exit a moment after their client has gone, and a rename
// needs them gone.
func waitDisconnected(ctx context.Context, conn *pgx.Conn, name string) error {
	deadline := time.Now().Add(keptBackendsWait)
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions still connected to %s after %s", n, name, keptBackendsWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
