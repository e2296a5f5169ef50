package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// What bank-sim may drop, alter or rename: only a database it can prove it
// created. A name proves nothing (anyone can CREATE DATABASE
// bank_sim_0123456789abcdef_prod), so every database bank-sim creates gets,
// right after its CREATE DATABASE and on the same session, a COMMENT ON
// DATABASE that ends in a marker:
//
//	[bank-sim-marker:v1:<the database's oid>:<check>]
//
// where check is a hash of the oid. The oid is the database's own, given by
// the server at creation and kept by a rename, so the marker holds for the
// database bank-sim made and for no other: a database created by hand has
// no such comment, a comment copied from one of bank-sim's databases names
// the wrong oid, and CREATE DATABASE … TEMPLATE does not copy comments. A
// restored dump gets a new oid too.
//
// Every statement that drops, alters or renames a database goes through
// ours, which reads the database's oid and comment again just before it,
// and refuses a database without the marker (errNotOurs). Listings
// (leftovers, kept databases, templates) use the same test, marked.
//
// The price: a run killed between its CREATE DATABASE and the COMMENT
// leaves a database without the marker. On a server bank-sim does not own,
// its template names it (pending.go); otherwise bank-sim never drops it,
// and bank-sim prune lists it, with the SQL to drop it.

// markerTag starts the marker in a database's comment.
const markerTag = "bank-sim-marker:v1:"

var markerRE = regexp.MustCompile(`\[bank-sim-marker:v1:([0-9]+):([0-9a-f]{16})\]$`)

// markerCheck is the hash in the marker of the database with this oid.
func markerCheck(oid uint32) string {
	sum := sha256.Sum256([]byte("bank-sim created the database with oid " + strconv.FormatUint(uint64(oid), 10)))
	return hex.EncodeToString(sum[:8])
}

// markerFor is the marker of the database with this oid, as it ends its
// comment.
func markerFor(oid uint32) string {
	return fmt.Sprintf("[%s%d:%s]", markerTag, oid, markerCheck(oid))
}

// marked reports whether comment, the comment of the database with this
// oid, ends in that database's marker.
func marked(oid uint32, comment string) bool {
	m := markerRE.FindStringSubmatch(comment)
	if m == nil {
		return false
	}
	n, err := strconv.ParseUint(m[1], 10, 32)
	return err == nil && uint32(n) == oid && m[2] == markerCheck(oid)
}

// dbRow is a database as bank-sim reads it from pg_database.
type dbRow struct {
	Name string
	OID  uint32
	// Template: a valid template. A database that an interrupted DROP
	// DATABASE left invalid (datconnlimit -2) is neither a template nor
	// Valid: ALTER DATABASE refuses it (FATAL 55000), DROP removes it.
	Template bool
	Valid    bool
	Comment  string
}

// Ours reports whether bank-sim created the database (its marker).
func (r dbRow) Ours() bool { return marked(r.OID, r.Comment) }

const dbRowColumns = `d.datname, d.oid, d.datistemplate AND d.datconnlimit <> -2, d.datconnlimit <> -2,
	coalesce(shobj_description(d.oid, 'pg_database'), '')`

// listDatabases reads the databases that cond (an SQL condition on pg_database
// d, with args) selects, in name order.
func listDatabases(ctx context.Context, conn *pgx.Conn, cond string, args ...any) ([]dbRow, error) {
	rows, err := conn.Query(ctx, "SELECT "+dbRowColumns+" FROM pg_database d WHERE "+cond+" ORDER BY d.datname", args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[dbRow])
}

// errNotOurs refuses to touch a database bank-sim did not create.
var errNotOurs = errors.New("it does not carry the marker bank-sim writes on the databases it creates, so bank-sim leaves it alone")

// ours reads name again and returns it if it carries bank-sim's marker;
// found is false when there is no such database (any more). Every drop,
// alter and rename of a database checks here first.
func ours(ctx context.Context, conn *pgx.Conn, name string) (r dbRow, found bool, err error) {
	found1, err := listDatabases(ctx, conn, "d.datname = $1", name)
	if err != nil || len(found1) == 0 {
		return dbRow{}, false, err
	}
	r = found1[0]
	if !r.Ours() {
		return r, true, fmt.Errorf("%s: %w", name, errNotOurs)
	}
	return r, true, nil
}

// mark writes bank-sim's marker on name, a database this session has just
// created.
func mark(ctx context.Context, conn *pgx.Conn, name, description string) error {
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = $1", name).Scan(&oid); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "COMMENT ON DATABASE "+quote(name)+" IS "+quoteLiteral(description+" "+markerFor(oid)))
	return err
}

// dropOurs drops name if bank-sim created it (it is not an error if it is
// gone already), making a template an ordinary database first, since a
// template cannot be dropped. force disconnects the sessions still on it;
// without it, PostgreSQL refuses (55006) while anyone is connected.
func dropOurs(ctx context.Context, conn *pgx.Conn, name string, force bool) error {
	r, found, err := ours(ctx, conn, name)
	if err != nil || !found {
		return err
	}
	if r.Template {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+quote(name)+" IS_TEMPLATE false"); err != nil {
			if isCode(err, "3D000") { // dropped meanwhile
				return nil
			}
			return err
		}
	}
	q := "DROP DATABASE IF EXISTS " + quote(name)
	if force {
		q += " WITH (FORCE)"
	}
	_, err = conn.Exec(ctx, q)
	return err
}

// alterOurs runs ALTER DATABASE name <clause> (RENAME TO …, IS_TEMPLATE …)
// if bank-sim created name.
func alterOurs(ctx context.Context, conn *pgx.Conn, name, clause string) error {
	r, found, err := ours(ctx, conn, name)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%s: no such database", name)
	}
	_, err = conn.Exec(ctx, "ALTER DATABASE "+quote(r.Name)+" "+clause)
	return err
}
