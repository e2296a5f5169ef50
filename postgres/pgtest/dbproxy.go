package pgtest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ThroughPort is a pool to direct's database that connects to listen, a
// free port of 127.0.0.1 where the test's database fault proxy (probe's or
// chaos --target's --db-proxy) will listen in front of direct's PostgreSQL,
// returned as upstream: a server given the pool reaches its database only
// through the proxy, as a team's API does when its database URL points at
// LISTEN. The pool is closed when the test ends.
func ThroughPort(t testing.TB, direct *pgxpool.Pool, mode ...pgx.QueryExecMode) (pool *pgxpool.Pool, listen, upstream string) {
	t.Helper()
	cfg := direct.Config()
	upstream = net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen = ln.Addr().String()
	_ = ln.Close() // the proxy listens here
	port := ln.Addr().(*net.TCPAddr).Port
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", uint16(port), nil
	cfg.MaxConnIdleTime = time.Minute
	for _, m := range mode {
		cfg.ConnConfig.DefaultQueryExecMode = m
	}
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, listen, upstream
}
