package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool opens a pool for a run of clients on the database that base reaches:
// a connection per client plus room for duplicates, late requests and the
// auditor. It also shortens PostgreSQL's deadlock_timeout (1 s by default):
// a transfer with the no-row-lock bug deadlocks often, and each deadlock
// would otherwise stall its clients for a second.
func Pool(ctx context.Context, base *pgxpool.Pool, clients int) (*pgxpool.Pool, error) {
	cfg := base.Config()
	cfg.MaxConns = int32(clients)*2 + 4
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open a pool for %d clients: %w", clients, err)
	}
	return pool, nil
}
