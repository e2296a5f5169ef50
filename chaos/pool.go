package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool opens a pool for a run of clients (Config's default when zero) on the
// database that base reaches: two connections per client (a duplicate's
// second copy, a late request, a staged deadlock's other transaction) plus
// room for the auditor, the wait policy's polls, and the side effects'
// dispatchers and consumer. Starved of connections,
// a handler cannot even release a key it failed on. It also shortens
// PostgreSQL's deadlock_timeout (1 s by default): a transfer with the
// no-row-lock bug deadlocks often, and each deadlock would otherwise stall
// its clients for a second; the deadlock fault relies on it too.
func Pool(ctx context.Context, base *pgxpool.Pool, clients int) (*pgxpool.Pool, error) {
	if clients <= 0 {
		clients = Config{}.WithDefaults().Clients
	}
	cfg := base.Config()
	cfg.MaxConns = int32(clients)*2 + 10
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open a pool for %d clients: %w", clients, err)
	}
	return pool, nil
}
