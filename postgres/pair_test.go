package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var kvTemplate = Template{Version: "kv", Init: func(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "CREATE TABLE kv (k text PRIMARY KEY)")
	return err
}}

func startPair(t *testing.T, ctx context.Context, po PairOptions) *Pair {
	t.Helper()
	t0 := time.Now()
	p, err := StartPair(ctx, Options{CacheDir: warmCache(t)}, po)
	if err != nil {
		t.Fatalf("StartPair: %v", err)
	}
	t.Cleanup(func() {
		a, b := p.PIDs()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		waitDead(t, a, 10*time.Second)
		waitDead(t, b, 10*time.Second)
	})
	t.Logf("%s (start %v)", p.Describe(), time.Since(t0).Round(time.Millisecond))
	if err := p.CreateDatabase(ctx, "t", kvTemplate); err != nil {
		t.Fatal(err)
	}
	return p
}

func insert(ctx context.Context, url, k string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, "INSERT INTO kv VALUES ($1)", k)
	return err
}

func has(t *testing.T, ctx context.Context, url, k string) bool {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM kv WHERE k = $1", k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// With asynchronous replication, a commit the primary acknowledged while
// the standby was not receiving is gone after the failover; what the
// standby had replayed is there, and the multi-host URL lands on the
// promoted standby.
func TestPairAsyncFailoverLosesWhatTheStandbyNeverReceived(t *testing.T) {
	t.Parallel()
	// scenarios.TestFailoverStory proves both outcomes through the story
	// by default; this pins them on the pair alone.
	exhaustive(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startPair(t, ctx, PairOptions{})
	if err := insert(ctx, p.URL("t"), "before"); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReplayed(ctx); err != nil {
		t.Fatal(err)
	}
	if !has(t, ctx, p.StandbyURL("t"), "before") {
		t.Fatal("the standby has not replayed the row WaitReplayed waited for")
	}
	if err := p.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insert(ctx, p.URL("t"), "acked"); err != nil {
		t.Fatalf("the acknowledged commit: %v", err)
	}
	if !has(t, ctx, p.PrimaryURL("t"), "acked") {
		t.Fatal("the primary lacks the commit it acknowledged")
	}
	oldPrimary, _ := p.PIDs()
	times, err := p.Failover(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: kill %v, promote %v, reconnect %v, total %v", times.Kill, times.Promote, times.Reconnect, times.Total)
	if alive(oldPrimary) {
		t.Errorf("the old primary %d still runs after KillPrimary", oldPrimary)
	}
	_, standbyPort := p.Ports()
	if port, err := p.ServingPort(ctx, "t"); err != nil || port != standbyPort {
		t.Fatalf("the multi-host URL serves from port %d (%v), want the promoted standby's %d", port, err, standbyPort)
	}
	if !has(t, ctx, p.URL("t"), "before") {
		t.Error("the row the standby had replayed is gone after the failover")
	}
	if has(t, ctx, p.URL("t"), "acked") {
		t.Error("the commit the standby never received survived the failover: StopReceiving did not stop it receiving")
	}
	if err := insert(ctx, p.URL("t"), "after"); err != nil {
		t.Errorf("writing through the multi-host URL after the failover: %v", err)
	}
}

// With synchronous replication, the primary holds a commit's
// acknowledgement until the standby has applied it: while the standby is
// not receiving, the commit waits (SyncRep); once it receives again, the
// commit returns, and survives the failover.
func TestPairSyncCommitWaitsForTheStandbyAndSurvivesFailover(t *testing.T) {
	t.Parallel()
	// scenarios.TestFailoverStory proves both outcomes through the story
	// by default; this pins them on the pair alone.
	exhaustive(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startPair(t, ctx, PairOptions{Sync: true})
	if err := p.WaitReplayed(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- insert(ctx, p.URL("t"), "acked") }()
	primary, err := pgx.Connect(ctx, p.PrimaryURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(ctx)
	if err := poll(ctx, "the commit to wait for the standby (wait_event SyncRep)", func(ctx context.Context) (bool, error) {
		var n int
		err := primary.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&n)
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the commit returned (%v) while the standby was not receiving", err)
	default:
	}
	if err := p.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the commit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for the commit to return once the standby received again")
	}
	if !has(t, ctx, p.StandbyURL("t"), "acked") {
		t.Fatal("remote_apply: the standby should show the commit before it was acknowledged")
	}
	if _, err := p.Failover(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if !has(t, ctx, p.URL("t"), "acked") {
		t.Error("the acknowledged commit is gone after the failover")
	}
	// The promoted standby has no standby of its own: it must not wait for one.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := insert(wctx, p.URL("t"), "after"); err != nil {
		t.Errorf("writing on the promoted standby: %v", err)
	}
}

// A pair whose parent dies leaves no postgres running, and the next
// supervisor in its slot (or prune) deletes what is left of it.
func TestPairLeavesNothingWhenClosedOrOrphaned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := cacheDir(t)
	p, err := StartPair(ctx, Options{CacheDir: dir}, PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.PIDs()
	slot := p.srv.slotPath
	// Killing the supervisor stands for bank-sim dying: the parent-death
	// signal must take both postmasters with it.
	if err := p.srv.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, a, 10*time.Second)
	waitDead(t, b, 10*time.Second)
	p.Close()
	if _, err := os.Stat(filepath.Join(slot, pairDirName)); err != nil {
		t.Fatalf("the killed pair's directory should still be there for prune to find: %v", err)
	}
	_, slots, err := PruneCache(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 || !slots[0].Removed {
		t.Fatalf("prune: %+v", slots)
	}
	if _, err := os.Stat(filepath.Join(slot, pairDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("prune left the pair's directory: %v", err)
	}
}

// The cost of a pair, for the story's explanation and docs/failover.md:
// its start, a failover, the servers' memory, and a commit's latency
// asynchronously and with each synchronous level. Exhaustive only: it
// measures, and asserts nothing a default run needs.
func TestPairCosts(t *testing.T) {
	t.Parallel()
	if os.Getenv("BANK_SIM_EXHAUSTIVE") != "1" {
		t.Skip("exhaustive: set BANK_SIM_EXHAUSTIVE=1 to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPair(t, ctx, PairOptions{Sync: true})
	if err := p.WaitReplayed(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, p.URL("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	const n = 500
	for _, level := range []string{"local", "on", "remote_apply", "local", "on", "remote_apply"} {
		if _, err := c.Exec(ctx, "SET synchronous_commit = "+level); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if _, err := c.Exec(ctx, "INSERT INTO kv VALUES ($1)", level+time.Now().String()); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("synchronous_commit = %-12s %v a commit (%d single-row INSERTs)", level, (time.Since(t0) / n).Round(time.Microsecond), n)
	}
	a, b := p.PIDs()
	t.Logf("RSS: primary postmaster %d kB (all its processes %d kB), standby postmaster %d kB (all its processes %d kB)",
		rssKB(a), rssKB(append([]int{a}, childrenOf(a)...)...), rssKB(b), rssKB(append([]int{b}, childrenOf(b)...)...))
	times, err := p.Failover(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: kill %v, promote %v, first read-write connection %v, total %v",
		times.Kill.Round(time.Millisecond), times.Promote.Round(time.Millisecond), times.Reconnect.Round(time.Millisecond), times.Total.Round(time.Millisecond))
}

func rssKB(pids ...int) int {
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				var kb int
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				total += kb
			}
		}
	}
	return total
}
