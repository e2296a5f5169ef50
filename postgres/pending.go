package postgres

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Databases being created: the one window the marker (marker.go) leaves.
// A run killed during a CREATE DATABASE leaves a database without the
// marker, since the server finishes the CREATE after its client has died,
// and a CREATE DATABASE under load takes seconds. On a server bank-sim does
// not own, every scenario database is cloned from the run's own template,
// which is marked; so before each CREATE DATABASE the run writes the new
// database's name into that template's comment (before its marker), and
// takes it out once the new database carries its own marker, or the
// CREATE failed.
//
// When the run has ended (its owner lock is free, owner.go), the names in
// its template's comment are its databases, marked or not: a random name,
// under the run's own key, written before the database existed, which no
// one else could have picked in advance. prune and the next run drop the
// template first and only then the unmarked databases it names: a CREATE
// DATABASE … TEMPLATE still running for a dead client holds the template,
// so the drop of the template waits for it to finish, and what it creates
// is then there to be dropped.
//
// The template's own CREATE DATABASE (the first of a run) has no template
// to be named in: it is written down on the run's machine instead
// (pendfile.go), so a run killed during it is cleaned up by prune or the
// next run on that machine, not from another. The embedded cluster needs
// neither: its templates are shared and its leftovers are dropped at start
// anyway.
// The comment is public (pg_shdescription), so the names are too: a user
// who creates a database under a pending name before bank-sim's CREATE
// gets a duplicate_database error back to the run, which takes the name
// out again; only a run killed in those milliseconds leaves it listed.

// pendingRE finds the names in a template's comment.
var pendingRE = regexp.MustCompile(` Being created from it: ([a-z0-9_ ]+)\. \[` + regexp.QuoteMeta(markerTag))

// pendingText is what a template's comment says of names.
func pendingText(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " Being created from it: " + strings.Join(names, " ") + "."
}

// pendingIn returns the names a template's comment lists as being created.
func pendingIn(comment string) []string {
	m := pendingRE.FindStringSubmatch(comment)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// pend adds name to (or takes it out of) the names being created from tpl,
// this Server's own template, and rewrites tpl's comment to list them.
func (s *Server) pend(ctx context.Context, conn *pgx.Conn, tpl, name string, add bool) error {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	var names []string
	for _, n := range s.pending[tpl] {
		if n != name {
			names = append(names, n)
		}
	}
	if add {
		names = append(names, name)
	}
	if err := mark(ctx, conn, tpl, s.owner.comment()+pendingText(names)); err != nil {
		return err
	}
	if s.pending == nil {
		s.pending = map[string][]string{}
	}
	s.pending[tpl] = names
	return nil
}

// settled reports whether the CREATE DATABASE of name that ended in err
// can no longer leave a database without the marker: it succeeded (and
// marked it), or the server refused it and there is no such database. A
// lost connection or a timeout may have left the CREATE running.
func settled(ctx context.Context, conn *pgx.Conn, name string, err error) bool {
	if err == nil {
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	found, lerr := listDatabases(ctx, conn, "d.datname = $1", name)
	return lerr == nil && len(found) == 0
}

// dropPending drops the databases that the templates of ended runs named
// as being created (pending, by name, each with its template), once each
// template is gone (dropped is the set of templates dropped): only a
// database still without a marker, whose run has still ended, and to which
// nobody is connected. It returns what it found, as leftovers.
func dropPending(ctx context.Context, conn *pgx.Conn, pending map[string]string, dropped map[string]bool, dryRun bool) []Leftover {
	var out []Leftover
	for name, tpl := range pending {
		recorded := tpl == recordedHere
		if !dryRun && !recorded && !dropped[tpl] {
			continue // a CREATE from it may still run; next time
		}
		found, err := listLeftoversNamed(ctx, conn, name)
		if err != nil {
			continue
		}
		if len(found) == 0 {
			// A recorded CREATE that never showed: refused, or never
			// sent. Forgotten only long after any CREATE could still end.
			if age, ok := recordAge(name); recorded && !dryRun && ok && age > pendingRecordTTL {
				forgetRecorded(name)
			}
			continue
		}
		l := found[0]
		key, _ := ownerOf(name)
		held, err := heldKeys(ctx, conn)
		if err != nil || held[key] {
			continue
		}
		if l.marked {
			if recorded && !dryRun {
				forgetRecorded(name) // its CREATE ended and marked it
			}
			continue // an ordinary leftover, listed as such
		}
		l.Pending = true
		l.State = Orphan
		if l.Sessions > 0 {
			l.State = OrphanInUse
		}
		if !dryRun && l.State == Orphan {
			// Not through dropOurs: it has no marker; the template's
			// comment (or this machine's record) is the proof, checked
			// above.
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(name)); err != nil {
				l.Err = explainDrop(err)
			} else {
				l.Dropped = true
				if recorded {
					forgetRecorded(name)
				}
			}
		}
		out = append(out, l.Leftover)
	}
	return out
}
