package pgtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5"
)

// RoundTrips is a pgx tracer that counts the round trips a connection
// makes: one per query or exec, one per batch (a pipeline is one).
type RoundTrips struct{ N atomic.Int64 }

// TraceQueryStart counts a query or exec.
func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.N.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch as one round trip.
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.N.Add(1)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// CountedConn opens a connection, with its round trips counted, to a new
// database cloned from tpl; both close when the test ends.
func CountedConn(ctx context.Context, t testing.TB, tpl postgres.Template) (*pgx.Conn, *RoundTrips) {
	t.Helper()
	db := NewDatabase(t, tpl)
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	counter := &RoundTrips{}
	cfg.Tracer = counter
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, counter
}
