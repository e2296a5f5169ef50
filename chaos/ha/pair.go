package ha

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PairOptions are a run's ties to the world, beside its Config.
type PairOptions struct {
	// Progress, when set, is told how many intents have settled.
	Progress chaos.Progress
	// Started, when set, is told the pair once both servers run, before
	// the workload starts (a report's header describes it).
	Started func(*postgres.Pair)
	// NetnsDir is where a partition's network records what it makes
	// (netns.StateDir of the cache directory, where bank-sim prune
	// looks): a run of cfg.Partition PartitionStandby needs it.
	NetnsDir string
}

// pairDB is the bank's database on the pair: the pair's clusters are
// made for the run and deleted with it, so one name does.
const pairDB = "bank"

// RunPair runs cfg on an embedded primary and its streaming standby
// (postgres.StartPair), replicated as cfg.Failover says (async when
// empty; async too when cfg.Bug is async-replication, whatever it says),
// and fails over at the intent the seed picks (Config.CrashIntent): as
// that intent starts, the standby stops receiving WAL
// (Pair.StopReceiving), and the intents from that one on wait until it
// has; once the primary has made StallCommits commits the
// standby does not have (asynchronous: committed, so most are already
// acknowledged; synchronous: waiting for the standby, so none is), the
// primary is killed with SIGKILL and the standby promoted, and the app's
// pool reconnects through the multi-host URL. Stopping the receiver first
// makes the loss certain rather than lucky: a standby on the same machine
// lags by microseconds. The failover is recorded in the history
// (Crash.Failover); the checker's acknowledged-missing and key-lost are
// what it lost. The error is for a run that could not happen.
func RunPair(ctx context.Context, cfg chaos.Config, o PairOptions) (*Report, error) {
	if cfg.Failover == "" || cfg.Bug != nil && cfg.Bug.AsyncReplication {
		cfg.Failover = chaos.ReplicationAsync
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var err error
	var repl *replLink
	var popts postgres.Options
	if cfg.Partition != nil && cfg.Partition.Of == chaos.PartitionStandby {
		if repl, err = newReplLink(o.NetnsDir); err != nil {
			return nil, err
		}
		defer repl.Close()
		popts = postgres.Options{ListenAddresses: []string{repl.link.AddrA().String()}, AllowClients: []string{repl.net.Subnet().String()}}
	}
	pair, err := postgres.StartPair(ctx, popts, postgres.PairOptions{Sync: cfg.Failover == chaos.ReplicationSync})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	if repl != nil {
		if err := repl.route(ctx, pair); err != nil {
			return nil, err
		}
	}
	if o.Started != nil {
		o.Started(pair)
	}
	if err := pair.CreateDatabase(ctx, pairDB, banks.Template); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(pair.URL(pairDB))
	if err != nil {
		return nil, err
	}
	base, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", postgres.ErrUnavailable, err)
	}
	defer base.Close()
	pool, err := chaos.PoolFor(ctx, base, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	primaryPort, standbyPort := pair.Ports()
	rec := chaos.FailoverRecord{Replication: cfg.Failover, PrimaryPort: primaryPort}
	var called, stalled, killing, killed, promoted time.Time
	began := time.Now()
	// The intents from the failover's on wait at the gate until the
	// standby has stopped receiving (a few hundred milliseconds on a
	// loaded machine, in which a short run could otherwise finish): so the
	// commits the kill waits for come after it, whatever the machine.
	gate, stalling := make(chan struct{}), atomic.Bool{}
	atIntent := func(ctx context.Context, i int) {
		if cfg.Intents > 0 && i >= cfg.CrashIntent() || stalling.Load() {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
	}
	crash := func(ctx context.Context) error {
		called = time.Now()
		stalling.Store(true)
		var opened sync.Once
		open := func() { opened.Do(func() { close(gate) }) }
		defer open()
		if repl != nil {
			// A partition: the replication link goes down, and the WAL
			// the primary writes from now on reaches nobody.
			if err := repl.link.Cut(); err != nil {
				return fmt.Errorf("cutting the primary off from its standby: %w", err)
			}
			rec.Cut = true
		} else if err := pair.StopReceiving(ctx); err != nil {
			return fmt.Errorf("stopping the standby's WAL receiver: %w", err)
		}
		stalled = time.Now()
		// Counted before the gate opens: what the primary commits from
		// here on, the standby does not have.
		baseline, err := countTransfers(ctx, base)
		if err != nil {
			return err
		}
		open()
		n, err := waitCommitsSince(ctx, base, baseline)
		if err != nil {
			return fmt.Errorf("%w; the standby stopped receiving %s into the run", err, stalled.Sub(began).Round(time.Millisecond))
		}
		rec.Commits = n
		killing = time.Now()
		if err := pair.KillPrimary(ctx); err != nil {
			return err
		}
		killed = time.Now()
		// Its connections are dead; the engine resets the pool once this
		// returns, and new ones go through the multi-host URL.
		base.Reset()
		if err := pair.Promote(ctx); err != nil {
			return err
		}
		promoted = time.Now()
		port, err := promotedPort(ctx, pair)
		if err != nil {
			return err
		}
		rec.ServingPort = port
		if port != standbyPort {
			return fmt.Errorf("after the failover the multi-host URL reached 127.0.0.1:%d, not the promoted standby on %d", port, standbyPort)
		}
		return nil
	}
	h, err := chaos.RunWith(ctx, pool, cfg, chaos.Options{CrashPostgres: crash, AtIntent: atIntent, Progress: o.Progress})
	if err != nil {
		return nil, err
	}
	if len(h.Crashes) != 1 {
		return nil, fmt.Errorf("the run failed over %d times, want once", len(h.Crashes))
	}
	at := h.Crashes[0].AtNs
	off := func(t time.Time) int64 { return at + t.Sub(called).Nanoseconds() }
	rec.StalledNs, rec.KilledNs, rec.PromotedNs = off(stalled), off(killed), off(promoted)
	h.Crashes[0].Failover = &rec
	r := &Report{History: h, Result: chaos.Check(h), KillNs: rec.KilledNs, KillStartNs: off(killing), StallNs: rec.StalledNs}
	r.measure()
	r.AckLost, r.KeysLost = r.Result.ByKind[chaos.KindAckMissing], r.Result.ByKind[chaos.KindKeyLost]
	return r, nil
}

// promotedPort connects through the multi-host URL as the app does, and
// returns the port of the server it reached, once that server says it is
// no longer a standby (pg_is_in_recovery() false) and takes writes.
func promotedPort(ctx context.Context, pair *postgres.Pair) (int, error) {
	port, err := pair.ServingPort(ctx, pairDB)
	if err != nil {
		return 0, err
	}
	pool, err := pgxpool.New(ctx, pair.StandbyURL(pairDB))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var recovering bool
	if err := pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
		return 0, fmt.Errorf("asking the promoted standby whether it is still in recovery: %w", err)
	}
	if recovering {
		return 0, fmt.Errorf("the standby on 127.0.0.1:%d is still in recovery after its promotion", port)
	}
	return port, nil
}
