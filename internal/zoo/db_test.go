package zoo_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/internal/zoo"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/jackc/pgx/v5/pgxpool"
)

// startDB serves m over a fresh lesson bank whose connections go to
// listen, a free port of 127.0.0.1 where probe's database fault proxy will
// listen in front of the test's PostgreSQL (upstream); direct is a pool
// that bypasses the proxy, for the ledger.
func startDB(t *testing.T, m zoo.DBMember) (s *zoo.Server, direct *pgxpool.Pool, listen, upstream string) {
	t.Helper()
	direct = pgtest.NewBank(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := zoo.SetupDB(ctx, direct); err != nil {
		t.Fatal(err)
	}
	cfg := direct.Config()
	upstream = net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen = ln.Addr().String()
	_ = ln.Close() // the probe listens here
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port), nil
	viaProxy, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	if s, err = zoo.StartDB(m, viaProxy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, direct, listen, upstream
}

// dbClasses are the database members: each fails probe's db-faults check
// for its reason ("" for the correct one, which passes).
var dbClasses = []struct {
	member zoo.DBMember
	reason string
	// chaos --target rules to come: server-error-stored (stored-server-error)
	// and lock-past-ttl (locked-past-ttl); chaos cannot fail a target's
	// database yet.
	slow bool
}{
	{member: zoo.DBCorrect},
	{member: zoo.StoredServerError, reason: "a server error was stored as the key's final answer"},
	// Each stuck intent is retried for --settle + --lock-ttl before it is
	// called stuck.
	{member: zoo.LockedPastTTL, reason: "was told 409 (in progress) for 800ms, past --lock-ttl 200ms", slow: true},
}

// The database fails under each database member at its commit, through
// probe's --db-proxy: the correct one ends each intent as one transfer, the
// others fail db-faults by the name of their class, and the bank conserves
// its money.
func TestDBMembersFailDBFaultsByTheNameOfTheirClass(t *testing.T) {
	t.Parallel()
	for _, c := range dbClasses {
		t.Run(c.member.Name, func(t *testing.T) {
			if c.slow {
				pgtest.Exhaustive(t)
			}
			t.Parallel()
			s, direct, listen, upstream := startDB(t, c.member)
			cfg := probeConfig(t, []string{s.URL()}, nil)
			cfg.Only = []string{"db-faults"}
			cfg.DBListen, cfg.DBUpstream = listen, upstream
			cfg.LockTTL, cfg.Settle = 200*time.Millisecond, 600*time.Millisecond
			rep := runProbe(t, cfg)
			res, ok := rep.Check("db-faults")
			if !ok {
				t.Fatalf("db-faults was not made:\n%s", dump(rep))
			}
			switch {
			case c.reason == "" && res.Status != probe.Pass:
				t.Fatalf("db-faults is %s against the correct member (%s), want PASS\n%s", res.Status, res.Reason, dump(rep))
			case c.reason != "" && (res.Status != probe.Fail || !strings.Contains(res.Reason, c.reason)):
				t.Fatalf("db-faults is %s (%s), want FAIL saying %q\n%s", res.Status, res.Reason, c.reason, dump(rep))
			}
			t.Logf("db-faults %s: %s", res.Status, res.Reason)
			if !strings.Contains(dump(rep), "the database connection was cut before COMMIT no. 1") ||
				!strings.Contains(dump(rep), "PostgreSQL committed COMMIT no. 1, and its answer was dropped") {
				t.Errorf("the faults did not both fire:\n%s", dump(rep))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := bank.ReadLedger(ctx, direct)
			if err != nil {
				t.Fatal(err)
			}
			if l.Total() != 7_500_000 {
				t.Errorf("total %d after the probe, want 7500000", l.Total())
			}
		})
	}
}
