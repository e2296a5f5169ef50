package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Template is a database schema+seed that scenario databases are cloned
// from.
type Template struct {
	// Version must change whenever Init's SQL changes (pass a hash of
	// it): it is part of the template database's name, and an embedded
	// cluster keeps templates across runs.
	Version string
	// Init creates the schema and seed data, connected to the new
	// template database. It must not leave other connections open.
	Init func(ctx context.Context, conn *pgx.Conn) error
}

// Database is a scenario database cloned from a Template.
type Database struct {
	Name string
	URL  string // pgx connection string

	srv     *Server
	version string // its template's, for Keep
}

type tplEntry struct {
	mu    sync.Mutex
	ready bool
	name  string
}

// cloneStrategy is appended to CREATE DATABASE on PostgreSQL 15+.
// FILE_COPY copies the template's files after a checkpoint; WAL_LOG (the
// 15+ default) writes every block to WAL. For our small templates
// FILE_COPY measured faster here (BenchmarkClone).
var cloneStrategy = "FILE_COPY"

// CreateDatabase clones a fresh database from tpl, creating the template
// database first if it does not exist. Its name is
// bank_sim_<owner>_<label>_<hex>, marked with this process's owner key
// (owner.go).
func (s *Server) CreateDatabase(ctx context.Context, tpl Template, label string) (*Database, error) {
	if tpl.Init == nil || tpl.Version == "" {
		return nil, errors.New("postgres: Template needs Version and Init")
	}
	tplName, err := s.ensureTemplate(ctx, tpl)
	if err != nil {
		return nil, err
	}
	if err := s.owner.ensure(ctx); err != nil {
		return nil, unavailable("%s: %v", s.desc, err)
	}
	name := s.owner.name(ident(label, 63-len(s.owner.name(""))-1-8) + "_" + randHex(4))
	conn, err := s.admin(ctx)
	if err != nil {
		return nil, unavailable("connecting to %s: %v", s.desc, err)
	}
	q := "CREATE DATABASE " + quote(name) + " TEMPLATE " + quote(tplName)
	if s.major >= 15 && cloneStrategy != "" {
		q += " STRATEGY " + cloneStrategy
	}
	if !s.embedded {
		// Named in its template before it exists, so that a killed run's
		// unmarked database is still provably bank-sim's (pending.go).
		if err := s.pend(ctx, conn, tplName, name, true); err != nil {
			s.release(conn, err)
			return nil, fmt.Errorf("postgres: naming %s in the comment of its template %s: %w", name, tplName, explain(err))
		}
	}
	err = s.create(ctx, conn, q, name)
	if !s.embedded && settled(context.WithoutCancel(ctx), conn, name, err) {
		// Left listed on failure: the name of a database that does not
		// exist costs nothing.
		s.pend(context.WithoutCancel(ctx), conn, tplName, name, false)
	}
	s.release(conn, err)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("postgres: cloning %s: %w", tplName, explain(err))
	}
	return &Database{Name: name, URL: s.dbURL(name), srv: s, version: tpl.Version}, nil
}

// createTimeout bounds a CREATE DATABASE that the caller has stopped
// waiting for.
const createTimeout = time.Minute

// create runs q, a CREATE DATABASE of name, to its end even when ctx is
// cancelled, and drops the database again if ctx was. Once sent, CREATE
// DATABASE completes on the server whether or not we wait: pgx gives up on
// a cancelled context by closing the socket, which the backend notices only
// when it next talks to the client, after the commit. Returning then would
// leave a database nobody knows about: what Ctrl-C during scenario --all
// used to leave behind.
func (s *Server) create(ctx context.Context, conn *pgx.Conn, q, name string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if _, err := conn.Exec(cctx, q); err != nil {
		return err
	}
	// What proves, from now on, that bank-sim made it (marker.go).
	if err := mark(cctx, conn, name, s.owner.comment()); err != nil {
		return fmt.Errorf("writing bank-sim's marker on the new database %s (without it, bank-sim never drops it: `bank-sim prune` lists it with the SQL to drop it): %w", name, err)
	}
	if ctx.Err() != nil {
		if err := dropOurs(cctx, conn, name, true); err != nil {
			return err
		}
		return ctx.Err()
	}
	return nil
}

// Drop removes the database, disconnecting any sessions still on it.
func (d *Database) Drop(ctx context.Context) error {
	conn, err := d.srv.admin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: dropping %s: %w", d.Name, err)
	}
	err = dropOurs(ctx, conn, d.Name, true)
	d.srv.release(conn, err)
	if err != nil {
		return fmt.Errorf("postgres: dropping %s: %w", d.Name, err)
	}
	return nil
}

func (s *Server) ensureTemplate(ctx context.Context, tpl Template) (string, error) {
	// An embedded cluster keeps its templates for later runs, with no
	// owner key in their names.
	name := sharedTemplatePrefix + ident(tpl.Version, 32)
	if !s.embedded {
		// A shared server: each process builds its own, marked with its
		// owner key, so concurrent runs never clone a template another is
		// still filling, and a killed run's template is its orphan.
		name = s.owner.name("tpl_" + ident(tpl.Version, 24))
	}
	s.tplMu.Lock()
	e := s.tpls[tpl.Version]
	if e == nil {
		e = &tplEntry{name: name}
		s.tpls[tpl.Version] = e
	}
	s.tplMu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ready {
		return e.name, nil
	}
	conn, err := s.admin(ctx)
	if err != nil {
		return "", unavailable("connecting to %s: %v", s.desc, err)
	}
	// A template is used only if bank-sim made it: under its name, or, when
	// a database that is not bank-sim's has that name, under its name and a
	// suffix.
	var found []dbRow
	found, err = listDatabases(ctx, conn, "(d.datname = $1 OR starts_with(d.datname, $1 || '_'))", e.name)
	if err == nil {
		taken, use := false, ""
		for _, r := range found {
			taken = taken || r.Name == e.name
			if use == "" && r.Template && r.Ours() && (r.Name == e.name || len(r.Name) == len(e.name)+9) {
				use = r.Name
			}
		}
		if use == "" {
			use = e.name
			if taken {
				use += "_" + randHex(4)
			}
			err = s.buildTemplate(ctx, conn, tpl, use)
		}
		if err == nil {
			e.name = use
		}
	}
	s.release(conn, err)
	if err != nil {
		return "", err
	}
	e.ready = true
	return e.name, nil
}

// buildTemplate fills a scratch database and only then renames it, so a
// crash or a failing Init never leaves a half-built template under the
// final name (the scratch one is dropped as a leftover on the next start).
func (s *Server) buildTemplate(ctx context.Context, admin *pgx.Conn, tpl Template, name string) error {
	if err := s.owner.ensure(ctx); err != nil {
		return unavailable("%s: %v", s.desc, err)
	}
	scratch := s.owner.name("build_" + randHex(4))
	forget := func() {}
	if !s.embedded {
		forget = recordPending(scratch) // no template of the run's to name it in yet (pendfile.go)
	}
	err := s.create(ctx, admin, "CREATE DATABASE "+quote(scratch), scratch)
	if settled(context.WithoutCancel(ctx), admin, scratch, err) {
		forget()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("postgres: creating template database: %w", explain(err))
	}
	dropScratch := func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = dropOurs(c, admin, scratch, true)
	}
	conn, err := pgx.Connect(ctx, s.dbURL(scratch))
	if err != nil {
		dropScratch()
		return unavailable("connecting to new template database: %v", err)
	}
	err = tpl.Init(ctx, conn)
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	conn.Close(closeCtx)
	cancel()
	if err != nil {
		dropScratch()
		return fmt.Errorf("postgres: template %s Init: %w", tpl.Version, err)
	}
	// The backend exits asynchronously after our Terminate. RENAME (and
	// later CREATE ... TEMPLATE) would otherwise wait in 100 ms steps, up
	// to 5 s, for "other users" of the database to go away.
	for i := 0; i < 500; i++ {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", scratch).Scan(&n); err != nil {
			dropScratch()
			return fmt.Errorf("postgres: %w", err)
		}
		if n == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	// The marker stays through the rename: it names the oid.
	for _, clause := range []string{"IS_TEMPLATE true", "RENAME TO " + quote(name)} {
		if err := alterOurs(ctx, admin, scratch, clause); err != nil {
			dropScratch()
			return fmt.Errorf("postgres: finishing template %s: %w", name, explain(err))
		}
	}
	return nil
}

// sharedTemplatePrefix starts the names of an embedded cluster's
// templates, which are kept for later runs and carry no owner.
const sharedTemplatePrefix = "bank_sim_tpl_"

// dropLeftovers removes, from an embedded cluster that has just started on
// a new port (so nobody else can be connected to it), every database
// bank-sim made (marker.go) but the finished shared templates and the kept
// databases (kept.go): scenario databases of a killed run, half-built
// templates, the databases of runs that used this cluster through its URL,
// and databases a DROP left invalid when it was interrupted. It drops all
// it can and returns what it could not: a leftover costs disk, not
// correctness, so it never stops a run.
func dropLeftovers(ctx context.Context, conn *pgx.Conn) (int, error) {
	found, err := listDatabases(ctx, conn, `d.datname LIKE 'bank\_sim\_%'`)
	if err != nil {
		return 0, err
	}
	var errs []error
	dropped := 0
	for _, d := range found {
		switch {
		case !d.Ours():
			continue
		case d.Template && strings.HasPrefix(d.Name, sharedTemplatePrefix):
			continue
		case d.Valid && !d.Template && strings.HasPrefix(d.Name, keptPrefix):
			continue
		}
		if err := dropOurs(ctx, conn, d.Name, true); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Name, err))
			continue
		}
		dropped++
	}
	return dropped, errors.Join(errs...)
}

// dropOwn drops every database marked with this Server's owner key that is
// still there: on an external server, its templates, and whatever a
// Database's Drop did not get to (an interrupted run). Like every drop, it
// drops only what carries bank-sim's marker.
func (s *Server) dropOwn() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := s.admin(ctx)
	if err != nil {
		return err
	}
	defer s.release(conn, errors.New("closing"))
	found, err := listDatabases(ctx, conn, "starts_with(d.datname, $1)", s.owner.name(""))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range found {
		if !d.Ours() {
			continue
		}
		if err := dropOurs(ctx, conn, d.Name, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func startExternal(ctx context.Context, o Options) (*Server, error) {
	o.URL = withConnectTimeout(o.URL)
	cfg, err := pgx.ParseConfig(o.URL)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, unavailable("DATABASE_URL / --database-url is not a valid connection string: %v", err)
	}
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	s := &Server{
		desc:     fmt.Sprintf("PostgreSQL at %s (DATABASE_URL)", where),
		adminURL: o.URL,
		tpls:     map[string]*tplEntry{},
	}
	conn, err := s.admin(ctx)
	if err != nil {
		return nil, reachError(cfg, err)
	}
	// With several hosts, every later connection goes first where this
	// one landed (hosts.go).
	var which string
	o.URL, where, which = pinHost(ctx, o.URL, cfg, conn)
	s.adminURL = o.URL
	s.dbURL = func(name string) string { return withDBName(o.URL, name) }
	version := s.serverVersion(ctx, conn)
	if s.major < 13 {
		s.release(conn, nil)
		return nil, unavailable("PostgreSQL %s at %s is too old; bank-sim needs 13 or newer (DROP DATABASE ... WITH (FORCE))", version, where)
	}
	s.owner, err = newOwner(ctx, o.URL)
	if err != nil {
		s.release(conn, nil)
		return nil, unavailable("PostgreSQL at %s: %v", where, err)
	}
	// What killed runs left here; ours are safe, we hold our lock.
	swept := sweepOrphans(ctx, conn)
	s.release(conn, nil)
	s.desc = fmt.Sprintf("PostgreSQL %s at %s (DATABASE_URL%s)", version, where, which)
	if swept > 0 {
		s.desc += fmt.Sprintf("; dropped %d %s left by killed bank-sim runs", swept, plural(swept, "database", "databases"))
	}
	return s, nil
}

// withDBName points a URL or keyword/value connection string at another
// database, keeping everything else (credentials, TLS settings).
func withDBName(conn, name string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		if u, err := url.Parse(conn); err == nil {
			u.Path = "/" + name
			u.RawPath = ""
			q := u.Query()
			if q.Has("dbname") {
				q.Set("dbname", name)
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	// Later keywords win in keyword/value strings.
	return conn + " dbname=" + name
}

func explain(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("%w (the user needs the CREATEDB privilege)", err)
	}
	return err
}

// ident turns s into a lowercase [a-z0-9_] identifier fragment of at most
// max bytes; longer ones are replaced by a hash so distinct inputs stay
// distinct.
func ident(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" {
		out = "x"
	}
	if len(out) > max {
		sum := sha256.Sum256([]byte(s))
		h := hex.EncodeToString(sum[:])
		keep := max - 17
		if keep < 0 {
			return h[:max]
		}
		out = out[:keep] + "_" + h[:16]
	}
	return out
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// quoteLiteral quotes s as an SQL string literal (COMMENT takes no
// parameters).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
