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
	return pool(ctx, base, clients, 2*int32(clients)+10, false)
}

// PoolFor opens the pool that a run of cfg needs. A deterministic run's
// tasks keep their connections while they are parked mid-transaction, and
// one that found every connection taken would wait for a task that cannot
// move: so its pool is larger, and the run fails rather than waits when
// even that is not enough.
func PoolFor(ctx context.Context, base *pgxpool.Pool, cfg Config) (*pgxpool.Pool, error) {
	cfg = cfg.WithDefaults()
	if cfg.Deterministic {
		return pool(ctx, base, cfg.Clients, 4*int32(cfg.Clients)+12, true)
	}
	return Pool(ctx, base, cfg.Clients)
}

func pool(ctx context.Context, base *pgxpool.Pool, clients int, conns int32, det bool) (*pgxpool.Pool, error) {
	if clients <= 0 {
		clients = Config{}.WithDefaults().Clients
		conns = 2*int32(clients) + 10
	}
	cfg := base.Config()
	cfg.MaxConns = conns
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	if det {
		// Set as the session starts, not by a statement of its own: see
		// schedDB.acquire.
		cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = detDeadlockTimeout
		// A task may leave its connection idle for a second of real time
		// while others run; a ping then would be a round trip per acquire.
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open a pool for %d clients: %w", clients, err)
	}
	return pool, nil
}
