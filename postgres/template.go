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

	srv *Server
}

type tplEntry struct {
	mu    sync.Mutex
	ready bool
	name  string
}

// cloneStrategy is appended to CREATE DATABASE on PostgreSQL 15+.
// FILE_COPY copies the template's files after a checkpoint; WAL_LOG (the
// 15+ default) writes every block to WAL. For our small templates
// FILE_COPY measured faster here (see the package tests' timings).
var cloneStrategy = "FILE_COPY"

// CreateDatabase clones a fresh database named bank_sim_<label>_<hex> from
// tpl, creating the template database first if it does not exist.
func (s *Server) CreateDatabase(ctx context.Context, tpl Template, label string) (*Database, error) {
	if tpl.Init == nil || tpl.Version == "" {
		return nil, errors.New("postgres: Template needs Version and Init")
	}
	tplName, err := s.ensureTemplate(ctx, tpl)
	if err != nil {
		return nil, err
	}
	name := "bank_sim_" + ident(label, 63-len("bank_sim_")-1-16) + "_" + randHex(8)
	conn, err := s.admin(ctx)
	if err != nil {
		return nil, unavailable("connecting to %s: %v", s.desc, err)
	}
	q := "CREATE DATABASE " + quote(name) + " TEMPLATE " + quote(tplName)
	if s.major >= 15 && cloneStrategy != "" {
		q += " STRATEGY " + cloneStrategy
	}
	_, err = conn.Exec(ctx, q)
	s.release(conn, err)
	if err != nil {
		return nil, fmt.Errorf("postgres: cloning %s: %w", tplName, explain(err))
	}
	return &Database{Name: name, URL: s.dbURL(name), srv: s}, nil
}

// Drop removes the database, disconnecting any sessions still on it.
func (d *Database) Drop(ctx context.Context) error {
	conn, err := d.srv.admin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: dropping %s: %w", d.Name, err)
	}
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(d.Name)+" WITH (FORCE)")
	d.srv.release(conn, err)
	if err != nil {
		return fmt.Errorf("postgres: dropping %s: %w", d.Name, err)
	}
	return nil
}

func (s *Server) ensureTemplate(ctx context.Context, tpl Template) (string, error) {
	name := "bank_sim_tpl_" + ident(tpl.Version, 32)
	if !s.embedded {
		// A shared server: each process builds its own, so concurrent
		// runs never clone a template another is still filling.
		name = "bank_sim_tpl_" + ident(tpl.Version, 24) + "_" + randHex(6)
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
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", e.name).Scan(&exists)
	if err == nil && !exists {
		err = s.buildTemplate(ctx, conn, tpl, e.name)
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
	scratch := "bank_sim_build_" + randHex(8)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+quote(scratch)); err != nil {
		return fmt.Errorf("postgres: creating template database: %w", explain(err))
	}
	dropScratch := func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.Exec(c, "DROP DATABASE IF EXISTS "+quote(scratch)+" WITH (FORCE)")
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
	for _, q := range []string{
		"ALTER DATABASE " + quote(scratch) + " IS_TEMPLATE true",
		"ALTER DATABASE " + quote(scratch) + " RENAME TO " + quote(name),
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			dropScratch()
			return fmt.Errorf("postgres: finishing template %s: %w", name, explain(err))
		}
	}
	return nil
}

// dropLeftovers removes scenario and half-built template databases that a
// killed run left in our slot. Finished templates are kept for reuse.
func dropLeftovers(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database
		WHERE datname LIKE 'bank\_sim\_%' AND (NOT datistemplate OR datname LIKE 'bank\_sim\_build\_%')`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+quote(n)+" IS_TEMPLATE false"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(n)+" WITH (FORCE)"); err != nil {
			return err
		}
	}
	return nil
}

// dropOwnTemplates removes the per-process templates on an external server.
func (s *Server) dropOwnTemplates() error {
	s.tplMu.Lock()
	var names []string
	for _, e := range s.tpls {
		names = append(names, e.name)
	}
	s.tplMu.Unlock()
	if len(names) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := s.admin(ctx)
	if err != nil {
		return err
	}
	defer s.release(conn, errors.New("closing"))
	var errs []error
	for _, n := range names {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+quote(n)+" IS_TEMPLATE false"); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "3D000" { // never built
				continue
			}
			errs = append(errs, err)
			continue
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(n)+" WITH (FORCE)"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func startExternal(ctx context.Context, o Options) (*Server, error) {
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
	s.dbURL = func(name string) string { return withDBName(o.URL, name) }
	conn, err := s.admin(ctx)
	if err != nil {
		return nil, unavailable("cannot connect to PostgreSQL at %s from DATABASE_URL / --database-url: %v; check that the server runs and the URL is right, or unset it to start an embedded server", where, err)
	}
	version := s.serverVersion(ctx, conn)
	s.release(conn, nil)
	if s.major < 13 {
		return nil, unavailable("PostgreSQL %s at %s is too old; bank-sim needs 13 or newer (DROP DATABASE ... WITH (FORCE))", version, where)
	}
	s.desc = fmt.Sprintf("PostgreSQL %s at %s (DATABASE_URL)", version, where)
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

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
