package cmd_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5"
)

// A --database-url with one host may be a cluster behind one address (a
// virtual IP) that a failover moves: the run watches its primary like a
// multi-host one's, and says, when nothing changed, that it looked.
func TestAOneHostDatabaseURLIsWatched(t *testing.T) {
	t.Parallel()
	srv, err := postgres.Start(context.Background(), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if n := postgres.HostCount(srv.AdminURL()); n != 1 {
		t.Fatalf("the test server's URL lists %d hosts, want 1", n)
	}
	cfg, err := pgx.ParseConfig(srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, context.Background(), postgres.Start, "chaos", "--seed", "7", "--intents", "20", "--clients", "2",
		"--database-url", srv.AdminURL(), "--no-color")
	want := regexp.MustCompile(fmt.Sprintf(`(?m)^primary +unchanged all run: 127\.0\.0\.1:%d on timeline 1, asked every \d+ ms$`, cfg.Port))
	if !want.MatchString(r.stdout) {
		t.Fatalf("exit %d; the report does not say the primary was watched (%s):\n%s\n%s", r.code, want, r.stdout, r.stderr)
	}
}
