package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A multi-host --database-url with the standby first reaches the primary,
// and so do the connections to a database bank-sim has just created there,
// which the standby does not have (it receives nothing here, so without
// the pinning the first host answers 3D000 every time, not by chance). The
// header names the primary.
func TestMultiHostURLWithTheStandbyFirstUsesThePrimary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startPair(t, ctx, PairOptions{})
	if err := p.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	primary, standby := p.Ports()
	for _, form := range []struct{ name, url string }{
		{"keywords", fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres password=%s dbname=postgres sslmode=disable target_session_attrs=read-write",
			standby, primary, p.password)},
		{"URL", fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=primary",
			p.password, standby, primary)},
	} {
		t.Run(form.name, func(t *testing.T) {
			srv, err := Start(ctx, Options{URL: form.url})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			want := fmt.Sprintf("at 127.0.0.1:%d (DATABASE_URL; host 2 of 2, by target_session_attrs=", primary)
			if !strings.Contains(srv.Describe(), want) {
				t.Errorf("header %q does not name the primary: want %q", srv.Describe(), want)
			}
			db, err := srv.CreateDatabase(ctx, kvTemplate, "hosts")
			if err != nil {
				t.Fatalf("creating a database through the standby-first URL: %v", err)
			}
			defer db.Drop(ctx)
			c, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				t.Fatalf("connecting to the new database through %s: %v", db.URL, err)
			}
			defer c.Close(ctx)
			var port int
			var recovery bool
			if err := c.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &recovery); err != nil {
				t.Fatal(err)
			}
			if port != primary || recovery {
				t.Errorf("the run's database is served from port %d (in recovery %v), want the primary's %d", port, recovery, primary)
			}
		})
	}
}
