package scenarios

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
	"github.com/jackc/pgx/v5"
)

// Recycled makes fresh banks by resetting databases that earlier phases have
// finished with, instead of cloning and dropping one per phase: for the
// audit, which runs hundreds of short phases, most of the time went to
// CREATE and DROP DATABASE. Each bank handed out is reset to the lesson's
// opening state (accounts, no transfers, no keys, ids from 1). close drops
// every database it made.
func Recycled(dbs Databases) (recycled Databases, close func()) {
	r := &recycler{dbs: dbs}
	return r, r.close
}

type recycler struct {
	dbs  Databases
	mu   sync.Mutex
	free []*Database
	all  []*Database
}

func (r *recycler) NewBank(ctx context.Context, label string) (*Database, error) {
	r.mu.Lock()
	var db *Database
	if n := len(r.free); n > 0 {
		db, r.free = r.free[n-1], r.free[:n-1]
	}
	r.mu.Unlock()
	if db == nil {
		var err error
		if db, err = r.dbs.NewBank(ctx, label); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.all = append(r.all, db)
		r.mu.Unlock()
	} else if err := reset(ctx, db); err != nil {
		return nil, err
	}
	return &Database{Pool: db.Pool, Name: db.Name, Close: func() {
		r.mu.Lock()
		r.free = append(r.free, db)
		r.mu.Unlock()
	}}, nil
}

func (r *recycler) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, db := range r.all {
		db.Close()
	}
	r.all, r.free = nil, nil
}

// reset puts a used bank back to the lesson's opening state, its clock
// running again on PostgreSQL's own.
func reset(ctx context.Context, db *Database) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "TRUNCATE transfers, idempotency_keys, "+strings.Join(outbox.Tables, ", ")+
			" RESTART IDENTITY; DELETE FROM accounts; UPDATE sim_clock SET stopped_at = NULL"); err != nil {
			return fmt.Errorf("reset the bank: %w", err)
		}
		for _, a := range bank.LessonAccounts {
			if _, err := tx.Exec(ctx,
				"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES ($1, $2, $3, $4, $5)",
				a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo); err != nil {
				return fmt.Errorf("reset account %d: %w", a.ID, err)
			}
		}
		return nil
	})
}
