package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// partitionRun is one partitioned chaos run and what it measured.
type partitionRun struct {
	h       *chaos.History
	res     chaos.Result
	cuts    []chaos.CutRecord
	failed  int // fault-phase attempts with no answer or a 5xx
	setup   time.Duration
	perNode time.Duration
	recover []time.Duration
}

// runPartitioned runs cfg over HTTP with each server copy in a network
// namespace of its own, reaching PostgreSQL (started on the run's links)
// over its own veth; cuts > 0 cuts every copy off from PostgreSQL that
// many times, each for cutFor.
func runPartitioned(t *testing.T, cfg chaos.Config, cuts int, cutFor time.Duration, afterCommit bool) partitionRun {
	t.Helper()
	pgtest.Exhaustive(t)
	if err := netns.Available(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Minute, errors.New("the partitioned run did not finish within 5 minutes"))
	defer cancel()
	var pr partitionRun
	an, err := chaos.NewAppNet(t.TempDir(), cfg.Instances)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := an.Close(); err != nil {
			t.Errorf("closing the network: %v", err)
		}
	})
	n := an.Net
	pr.setup = an.Setup
	pr.perNode = pr.setup / time.Duration(cfg.Instances)

	srv, err := postgres.Start(ctx, postgres.Options{ListenAddresses: an.ListenAddresses(), AllowClients: an.Clients()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	db, err := banks.OnServer(srv, banks.Options{}).NewBank(ctx, "partition")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	pool, err := chaos.Pool(ctx, db.Pool, cfg.Clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hosts, err := an.Hosts(ctx, db.Pool.Config().ConnString(), int32(cfg.Clients)+4)
	if err != nil {
		t.Fatal(err)
	}
	if cuts == 0 {
		// A calm run: nothing is cut, so nothing needs the 3 s work
		// timeout that makes a cut-off copy answer 500. On a loaded
		// machine (load 15-18, beside two other test runs) it timed out a
		// handler between second-transaction's two commits, the very
		// fault the partition is meant to be the only source of.
		for k := range hosts {
			hosts[k].WorkTimeout = time.Minute
		}
	}
	p := &chaos.Partition{Links: an.DB, At: chaos.PartitionAt(cfg.Seed, cfg.Intents, cuts), For: cutFor,
		AfterCommit: afterCommit, DB: pool}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	opts := chaos.Options{Hosts: hosts}
	p.Options(&opts)
	runStart := time.Now()
	pr.h, err = chaos.RunWith(ctx, pool, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	pr.res = chaos.Check(pr.h)
	pr.cuts = p.Cuts()
	whys := map[string]bool{}
	for _, in := range pr.h.Intents {
		for _, a := range in.Attempts {
			if a.Phase == chaos.PhaseFault && (a.Seen == chaos.SeenUnknown || a.Status >= 500) {
				pr.failed++
				why := a.Error
				if why == "" {
					why = fmt.Sprintf("%d %s", a.Status, a.Body)
				}
				if len(whys) < 5 && !whys[why] {
					whys[why] = true
				}
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	t.Logf("network of %d namespaces and %d links set up in %s (%s a namespace with its 2 links); subnet %s; run %s; cuts %d, %d fault-phase attempts failed; verdict %s, %d violations; heap %d MiB, sys %d MiB",
		cfg.Instances, 2*cfg.Instances, pr.setup, pr.perNode, n.Subnet(), pr.h.Duration.Round(time.Millisecond), len(pr.cuts), pr.failed,
		pr.res.Verdict(), len(pr.res.Violations), m.HeapAlloc>>20, m.Sys>>20)
	// Recovery: from each heal to the end of the first attempt begun after
	// it that got a final answer (offsets from runStart, within a few ms of
	// the engine's own start).
	for _, c := range pr.cuts {
		healed := int64(c.Healed.Sub(runStart))
		first := int64(-1)
		for _, in := range pr.h.Intents {
			for _, a := range in.Attempts {
				if a.StartNs >= healed && a.Seen != chaos.SeenUnknown && (first < 0 || a.EndNs < first) {
					first = a.EndNs
				}
			}
		}
		if first >= 0 {
			pr.recover = append(pr.recover, time.Duration(first-healed))
		}
	}
	t.Logf("time from each heal to the first answered attempt begun after it: %v", pr.recover)
	for why := range whys {
		t.Logf("a failed attempt: %.200s", why)
	}
	for _, c := range pr.cuts {
		t.Logf("cut at intent %d for %s", c.Intent, c.Healed.Sub(c.Cut).Round(time.Millisecond))
	}
	return pr
}

func partitionConfig(seed uint64) chaos.Config {
	// No fault of the schedule's: whatever fails, the partition did.
	return chaos.Config{Seed: seed, Intents: 200, Clients: 16, Instances: 3, HTTP: true, Faults: chaos.Rates{}}
}

// Three cuts of every server copy from PostgreSQL, mid-workload: at the
// start of seeded intents (whatever is in flight then), and again right
// after a transfer commits. Requests fail while a cut lasts, and the
// correct handler still moves no money twice and loses no acknowledged
// transfer.
func TestPartitionCorrectHandlerStaysValid(t *testing.T) {
	for _, afterCommit := range []bool{false, true} {
		pr := runPartitioned(t, partitionConfig(7), 3, 4*time.Second, afterCommit)
		if len(pr.cuts) != 3 {
			t.Fatalf("after commit %v: want 3 cuts, got %d", afterCommit, len(pr.cuts))
		}
		if pr.failed == 0 {
			t.Fatalf("after commit %v: no attempt failed: the partition did not bite", afterCommit)
		}
		if !pr.res.Valid() {
			logViolations(t, pr.h, pr.res)
			t.Fatalf("after commit %v: %d violations with the correct handler under a partition", afterCommit, len(pr.res.Violations))
		}
	}
}

// The same partition, cutting right after a commit, with a handler that
// stores the response in a second transaction after the transfer's: the
// cut between the two commits leaves a done transfer whose key has no
// answer, and the retry that takes it over moves the money again.
// Without the partition the same run breaks nothing (no other fault), so
// the partition is what broke it.
func TestPartitionBreaksSecondTransaction(t *testing.T) {
	bug, err := mistakes.Lookup(partitionBug)
	if err != nil {
		t.Fatal(err)
	}
	cfg := partitionConfig(7)
	cfg.Bug = &bug
	pr := runPartitioned(t, cfg, 3, 4*time.Second, true)
	if pr.res.Valid() {
		t.Fatalf("the partition broke nothing with the %s bug (%d attempts failed)", partitionBug, pr.failed)
	}
	t.Logf("violations by kind: %v", pr.res.ByKind)

	// The control: no cut, and no work timeout a loaded machine could
	// reach (runPartitioned); the cuts fail many more attempts.
	calm := runPartitioned(t, cfg, 0, 0, true)
	if !calm.res.Valid() {
		logViolations(t, calm.h, calm.res)
		t.Fatalf("without the partition: %d violations; want none", len(calm.res.Violations))
	}
	if pr.failed <= calm.failed {
		t.Errorf("the cuts failed %d attempts, the calm run %d: want more with the cuts", pr.failed, calm.failed)
	}
}

// partitionBug is the mistake a partition exposes and a calm run does not.
const partitionBug = "second-transaction"

// Hosts place the copies of an HTTP run of bank-sim's own server only: a
// run in process, or with a count that is not the copies', is refused
// before it touches the database.
func TestHostsNeedAnHTTPRunWithOneHostPerCopy(t *testing.T) {
	ctx := context.Background()
	one := []chaos.Host{{}}
	if _, err := chaos.RunWith(ctx, nil, chaos.Config{Seed: 1, Intents: 1, Instances: 1}, chaos.Options{Hosts: one}); err == nil || !strings.Contains(err.Error(), "HTTP run") {
		t.Errorf("in process: %v, want a refusal naming the HTTP run", err)
	}
	if _, err := chaos.RunWith(ctx, nil, chaos.Config{Seed: 1, Intents: 1, Instances: 2, HTTP: true}, chaos.Options{Hosts: one}); err == nil || !strings.Contains(err.Error(), "1 hosts for 2") {
		t.Errorf("1 host for 2 copies: %v, want a refusal", err)
	}
}
