// Package banks makes the lesson's bank as fresh databases on a
// postgres.Server: its template, the makers of clones, and the recycler
// that resets used banks instead of cloning again. Both the scenarios and
// the tests' helper (pgtest) need them, so they live here, under postgres,
// where pgtest can reach them without importing the scenarios above it.
package banks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Template is the lesson's bank as a template database: every phase gets
// a clone of it instead of running the DDL again. It holds the side effects'
// tables too (outbox.Schema), and its version covers both schemas.
var Template = postgres.Template{
	Version: templateVersion(),
	Init: func(ctx context.Context, conn *pgx.Conn) error {
		if err := bank.Setup(ctx, conn); err != nil {
			return err
		}
		return outbox.Setup(ctx, conn)
	},
}

// templateVersion covers both schemas in one short hash, so that template
// names stay the length of one schema's version.
func templateVersion() string {
	h := sha256.Sum256([]byte(bank.SchemaVersion() + "/" + outbox.SchemaVersion()))
	return hex.EncodeToString(h[:])[:12]
}

// Database is a fresh bank for one phase.
type Database struct {
	Pool  *pgxpool.Pool
	Name  string
	Close func() // closes the pool and drops the database
	// Keep, when set, closes the pool and keeps the database for a later
	// run instead of dropping it (an embedded cluster's, see
	// postgres.Database.Keep). Only a bank reset to the opening state may
	// be kept.
	Keep func()
}

// Databases makes fresh banks: a database cloned from the lesson's template.
type Databases interface {
	NewBank(ctx context.Context, label string) (*Database, error)
}

// PoolSize is the connections each phase's pool may open: enough for two
// copies of a request, a waiting poller and the checker to overlap.
const PoolSize = 8

// Options shape the banks OnServer makes; the zero value suits one run of
// the CLI.
type Options struct {
	// MaxConns bounds each bank's pool; PoolSize when zero.
	MaxConns int32
	// Fresh makes every bank a new clone of Template, dropped when closed:
	// no database an earlier run kept is taken, and the banks have no Keep,
	// so none is kept for a later run. pgtest lends fresh banks: each test
	// binary clones its own and drops them when it ends, leaving the
	// cluster's kept databases to the runs that keep them.
	Fresh bool
	// Async hands each bank's DROP DATABASE (or the rename that keeps it)
	// to the background, where Close would otherwise wait for the closed
	// pool's backends to exit (up to ~100 ms): time a run of many phases
	// need not spend. Call Maker.Wait before the server is closed.
	Async bool
}

// Maker makes fresh banks on one server.
type Maker struct {
	srv   *postgres.Server
	o     Options
	drops sync.WaitGroup
}

// OnServer makes fresh banks on srv: a database an earlier run kept
// (postgres.Server.TakeKept), else a clone of Template (always a clone
// when o.Fresh). Closing one drops its database (before Close returns,
// unless o.Async); Keep gives it back to the cluster for a later run
// instead (its caller must have reset it).
func OnServer(srv *postgres.Server, o Options) *Maker { return &Maker{srv: srv, o: o} }

// Wait blocks until every drop handed to the background (Options.Async)
// has finished.
func (m *Maker) Wait() { m.drops.Wait() }

// NewBank makes a fresh bank named after label.
func (m *Maker) NewBank(ctx context.Context, label string) (*Database, error) {
	var db *postgres.Database
	var err error
	if !m.o.Fresh {
		// A database an earlier run kept (an embedded cluster only) saves
		// a clone; it is in the state its last user reset it to.
		if db, err = m.srv.TakeKept(ctx, Template, label); err != nil {
			return nil, err
		}
	}
	if db == nil {
		if db, err = m.srv.CreateDatabase(ctx, Template, label); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		_ = db.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %v", postgres.ErrUnavailable, err)
	}
	cfg.MaxConns = PoolSize
	if m.o.MaxConns > 0 {
		cfg.MaxConns = m.o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = db.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %v", postgres.ErrUnavailable, err)
	}
	// end drops the database, or keeps it for a later run; it must happen
	// even when the run was interrupted.
	end := func(keep bool) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if keep {
			_ = db.Keep(dctx)
			return
		}
		_ = db.Drop(dctx)
	}
	closer := func(keep bool) func() {
		return func() {
			pool.Close()
			if !m.o.Async {
				end(keep)
				return
			}
			m.drops.Add(1)
			go func() {
				defer m.drops.Done()
				end(keep)
			}()
		}
	}
	b := &Database{Pool: pool, Name: db.Name, Close: closer(false)}
	if !m.o.Fresh {
		b.Keep = closer(true)
	}
	return b, nil
}
