package ha_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// How a Patroni cell fails the cluster over.
const (
	// viaCmd: the run's --failover-cmd is `patronictl failover --force`
	// to a replica (the synchronous one in synchronous_mode): Patroni
	// stops the leader and promotes it.
	viaCmd = "failover-cmd"
	// viaKill: the leader's node (patroni and its PostgreSQL) dies with
	// SIGKILL at the seeded intent, and the run is told to expect a
	// failover (--expect-failover): its key expires and Patroni elects a
	// replica.
	viaKill = "leader-sigkill"
	// viaStall: as viaKill, once the leader's walsenders have been frozen
	// and it has made ha.StallCommits commits the replicas do not have.
	viaStall = "stalled-standby"
)

// patroniIntents is the size of a cell's planned run. Clients still send
// once the new leader serves however fast they are (patronictl takes
// 3–4 s, a killed leader's key expires after Patroni's ttl, 10 s here):
// a drill's workload goes on past its plan until a transfer sent after
// the failover is acknowledged (RunExternal).
const patroniIntents = 2000

// patroniCell is one run of the matrix, with its figures.
type patroniCell struct {
	how, mode     string
	change        chaos.PrimaryChangeResult
	res           chaos.Result
	cmd           *chaos.FailoverCommand
	failover      hacluster.Failover // viaKill and viaStall: Patroni's side
	startup       time.Duration
	pss, rss      int64
	procs, stalls int
}

func (c patroniCell) String() string {
	s := fmt.Sprintf("Patroni %s %s: acknowledged transfers lost %d, keys lost %d; %s",
		c.how, c.mode, c.res.ByKind[chaos.KindAckMissing], c.res.ByKind[chaos.KindKeyLost], c.change.Line())
	s += fmt.Sprintf("; no primary for %s (watcher)", time.Duration(c.change.SeenNs-c.change.LastSeenNs).Round(time.Millisecond))
	if c.cmd != nil {
		s += fmt.Sprintf("; patronictl took %s", time.Duration(c.cmd.EndNs-c.cmd.StartNs).Round(time.Millisecond))
	} else {
		s += fmt.Sprintf("; new leader in Patroni after %s, first write %s", c.failover.Monitor.Round(100*time.Millisecond), c.failover.Write.Round(100*time.Millisecond))
	}
	if c.stalls > 0 {
		s += fmt.Sprintf("; %d commits the replicas lacked at the kill", c.stalls)
	}
	s += fmt.Sprintf("; %d intents (%d planned); cluster up in %s; memory %d processes, PSS %d MiB (RSS %d MiB); %d violations",
		c.res.Stats.Intents, patroniIntents, c.startup.Round(100*time.Millisecond), c.procs, c.pss>>20, c.rss>>20, len(c.res.Violations))
	var kinds []string
	for _, k := range chaos.Kinds() {
		if n := c.res.ByKind[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(kinds) > 0 {
		s += " (" + strings.Join(kinds, ", ") + ")"
	}
	return s
}

// captured remembers the bank database a run makes, for a stall to count
// its commits.
type captured struct {
	banks.Databases
	mu sync.Mutex
	db *banks.Database
}

func (c *captured) NewBank(ctx context.Context, label string) (*banks.Database, error) {
	db, err := c.Databases.NewBank(ctx, label)
	c.mu.Lock()
	c.db = db
	c.mu.Unlock()
	return db, err
}

// throughPatroni starts a Patroni cluster (synchronous_mode or not), runs
// a chaos workload through its multi-host URL, fails it over as how says
// at the seeded intent, and checks what must hold whatever the engine:
// one change of primary, from the leader to another node, on the next
// timeline, seen by the run with the cause it was given, the workload on
// both sides of it, every intent settled. The cluster is gone when it
// returns; its logs are logged if the test failed.
func throughPatroni(t *testing.T, how string, synchronous bool) patroniCell {
	t.Helper()
	if err := hacluster.PatroniAvailable(); err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 10*time.Minute,
		errors.New("a run through a Patroni failover did not finish within 10 minutes"))
	defer cancel()
	p, err := hacluster.StartPatroni(ctx, hacluster.PatroniOptions{Sync: synchronous})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the cluster's logs:\n%s", p.Logs(80))
		}
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	}()
	cell := patroniCell{how: how, mode: mode(synchronous), startup: p.Startup}
	srv, err := postgres.Start(ctx, postgres.Options{URL: p.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			t.Logf("closing the bank's server after the failover: %v", err)
		}
	}()
	leader, err := p.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := chaos.Config{Seed: pairSeed, Clients: 8, Intents: patroniIntents, Faults: chaos.Rates{}}.WithDefaults()
	dbs := &captured{Databases: banks.OnServer(srv, banks.Options{})}
	o := ha.ExternalOptions{WatchURL: srv.AdminURL(), CmdTimeout: 2 * time.Minute, WaitTimeout: 2 * time.Minute}
	var opts chaos.Options
	killed := make(chan error, 1)
	if how == viaCmd {
		candidate, err := p.Candidate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o.FailoverCmd = p.FailoverCommand(candidate)
		opts.AtIntent = func(_ context.Context, i int) {
			if i == cfg.CrashIntent() {
				cell.pss, cell.rss, cell.procs = p.Memory()
			}
		}
		killed <- nil
	} else {
		o.Expect = true
		var once sync.Once
		opts.AtIntent = func(_ context.Context, i int) {
			if i != cfg.CrashIntent() {
				return
			}
			once.Do(func() {
				go func() { killed <- cell.kill(ctx, p, dbs, how == viaStall) }()
			})
		}
	}
	h, err := ha.RunExternal(ctx, dbs, cfg, opts, o)
	if err != nil {
		select {
		case kerr := <-killed:
			t.Fatalf("%v (failing the cluster over: %v)", err, kerr)
		default:
			t.Fatal(err)
		}
	}
	select {
	case err := <-killed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("failing the cluster over: %v", context.Cause(ctx))
	}
	cell.res, cell.cmd = chaos.Check(h), h.FailoverCommand
	cell.change = checkOneChange(t, cfg, h, cell.res, leader.Port, how == viaCmd, "failed over")
	return cell
}

// checkOneChange checks what must hold after any engine's failover: one
// change of primary, from the leader (on leaderPort) to another node, on
// the next timeline, with the cause the run was given (its --failover-cmd
// exited 0, its output containing cmdSays), the window known on both
// sides, every intent settled. It returns the change.
func checkOneChange(t *testing.T, cfg chaos.Config, h *chaos.History, res chaos.Result, leaderPort int, byCmd bool, cmdSays string) chaos.PrimaryChangeResult {
	t.Helper()
	if len(res.PrimaryChanges) != 1 {
		t.Fatalf("primary changes: %+v; want one", res.PrimaryChanges)
	}
	pc := res.PrimaryChanges[0]
	want := chaos.CauseExpected
	if byCmd {
		want = chaos.CauseCommand
		if fc := h.FailoverCommand; fc == nil || fc.ExitCode != 0 || !strings.Contains(fc.Output, cmdSays) {
			t.Errorf("the failover command: %+v; want exit 0 and its output (%q) kept", fc, cmdSays)
		}
	}
	if from := fmt.Sprintf("127.0.0.1:%d", leaderPort); pc.From != from || pc.To == from || pc.Cause != want {
		t.Errorf("the change: %s → %s (%s); want from the leader %s to another node (%s)", pc.From, pc.To, pc.Cause, from, want)
	}
	if pc.FromTimeline < 1 || pc.ToTimeline != pc.FromTimeline+1 {
		t.Errorf("timelines %d → %d, want the next one after a promotion", pc.FromTimeline, pc.ToTimeline)
	}
	if pc.LastAckNs < 0 || pc.FirstAckNs <= pc.LastAckNs {
		t.Errorf("unavailability window: last acknowledged %d, first after %d; want both, in order (the workload went on)", pc.LastAckNs, pc.FirstAckNs)
	}
	// More than planned when the workload had to go on until the new
	// primary acknowledged a transfer (Options.KeepGoing).
	if res.Stats.Intents < cfg.Intents || res.ByKind[chaos.KindUnresolved] != 0 {
		t.Errorf("%d intents of %d planned, %d unresolved: healing after the failover did not settle them all", res.Stats.Intents, cfg.Intents, res.ByKind[chaos.KindUnresolved])
	}
	return pc
}

// kill kills the leader's node, first stalling replication until the
// leader has ha.StallCommits commits the replicas lack when stall, and
// waits for Patroni's new leader.
func (c *patroniCell) kill(ctx context.Context, p *hacluster.Patroni, dbs *captured, stall bool) error {
	if stall {
		resume, err := p.StallReplication(ctx)
		if err != nil {
			return err
		}
		defer resume()
		dbs.mu.Lock()
		db := dbs.db
		dbs.mu.Unlock()
		if c.stalls, err = ha.WaitCommits(ctx, db.Pool); err != nil {
			return err
		}
	}
	c.pss, c.rss, c.procs = p.Memory()
	old, err := p.KillLeader(ctx)
	if err != nil {
		return err
	}
	c.failover, err = p.WaitFailover(ctx, old, 2*time.Minute)
	return err
}

// The matrix of docs/ha.md on Patroni: synchronous_mode off and on,
// failed over by the team's own patronictl (--failover-cmd), by the
// leader's SIGKILL, and by its SIGKILL after replication stalled. With
// synchronous_mode on nothing acknowledged may be lost; off, a stalled
// standby must lose acknowledged transfers (the run's own check would be
// blind otherwise), and the other cells' losses are measured and logged,
// never silent.
func TestPatroniFailoverMatrix(t *testing.T) {
	pgtest.Exhaustive(t)
	var summary []string
	for _, how := range []string{viaCmd, viaKill, viaStall} {
		for _, sync := range []bool{false, true} {
			t.Run(how+"/"+mode(sync), func(t *testing.T) {
				c := throughPatroni(t, how, sync)
				summary = append(summary, c.String())
				t.Log(c)
				lost, keys := c.res.ByKind[chaos.KindAckMissing], c.res.ByKind[chaos.KindKeyLost]
				switch {
				case sync && (lost != 0 || keys != 0):
					t.Errorf("synchronous_mode: %d acknowledged transfers and %d keys lost across the failover, want none", lost, keys)
				case !sync && how == viaStall && lost == 0:
					t.Errorf("asynchronous, %d commits the replicas lacked at the kill: no acknowledged transfer lost", c.stalls)
				}
			})
		}
	}
	t.Logf("all cells:\n%s", strings.Join(summary, "\n"))
}
