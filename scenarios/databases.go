package scenarios

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

// BankTemplate is the lesson's bank as a template database: every phase gets
// a clone of it instead of running the DDL again. It holds the side effects'
// tables too (outbox.Schema), and its version covers both schemas.
var BankTemplate = postgres.Template{
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

// ServerBanks makes fresh banks on srv: a database an earlier run kept
// (postgres.Server.TakeKept), else a clone of BankTemplate. Closing one
// drops its database before Close returns; Keep gives it back to the
// cluster for a later run instead (its caller must have reset it).
func ServerBanks(srv *postgres.Server) Databases { return &serverBanks{srv: srv} }

// AsyncBanks is ServerBanks whose Close (and Keep) hands the DROP DATABASE
// (the rename) to the background: both wait for the closed pool's backends
// to exit (up to ~100 ms), time a run of many phases need not spend. wait
// blocks until every drop has finished; call it before the server is
// closed.
func AsyncBanks(srv *postgres.Server) (dbs Databases, wait func()) {
	b := &serverBanks{srv: srv, async: true}
	return b, b.drops.Wait
}

type serverBanks struct {
	srv   *postgres.Server
	async bool
	drops sync.WaitGroup
}

// PoolSize is the connections each phase's pool may open: enough for two
// copies of a request, a waiting poller and the checker to overlap.
const PoolSize = 8

func (s *serverBanks) NewBank(ctx context.Context, label string) (*Database, error) {
	// A database an earlier run kept (an embedded cluster only) saves a
	// clone; it is in the state its last user reset it to.
	db, err := s.srv.TakeKept(ctx, BankTemplate, label)
	if err != nil {
		return nil, err
	}
	if db == nil {
		if db, err = s.srv.CreateDatabase(ctx, BankTemplate, label); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		_ = db.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %v", postgres.ErrUnavailable, err)
	}
	cfg.MaxConns = PoolSize
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
			if !s.async {
				end(keep)
				return
			}
			s.drops.Add(1)
			go func() {
				defer s.drops.Done()
				end(keep)
			}()
		}
	}
	return &Database{Pool: pool, Name: db.Name, Close: closer(false), Keep: closer(true)}, nil
}
