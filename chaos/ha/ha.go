// Package ha runs the chaos workload through a highly available
// PostgreSQL (a primary, a standby and the engine that fails over between
// them), kills the leader in the middle, and measures what the failover
// cost: how long the bank could not write, and which acknowledged
// transfers and completed keys the new primary does not have.
//
// The run is chaos's own (chaos.RunWith with Config.KillPostgres): the
// same seeded workload, faults and checker; only the crash is the
// leader's death and the engine's failover, not a restart in place. The
// checker's acknowledged-missing (a client told 201 whose transfer is not
// there) and key-lost (a key that gave a final answer is not completed at
// the end) are the two ways a failover can lose what a client was told.
package ha

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Leader is how a run kills the cluster's leader.
type Leader struct {
	// Kill kills the leader and returns once another node accepts
	// writes; killed is when the leader was dead (before the wait).
	Kill func(ctx context.Context) (killed time.Time, err error)
	// Stall, when set, is called before Kill: it stops replication to
	// the standby, and Run waits until StallCommits commits have happened
	// on the primary that the standby does not have, so that the kill
	// finds some. resume ends the stall.
	Stall func(ctx context.Context) (resume func(), err error)
}

// StallCommits is how many commits the primary makes, during a stall,
// before the leader is killed: transfers committed (an asynchronous
// standby), or sessions waiting for the standby to confirm theirs (a
// synchronous one).
const StallCommits = 3

// stallTimeout bounds the wait for those commits.
const stallTimeout = 30 * time.Second

// Local is the Leader of a cluster this process started: Kill is
// KillLeader then WaitFailover (bounded by failoverTimeout), and, when
// stall, Stall is StallReplication.
func Local(c *hacluster.Cluster, stall bool, failoverTimeout time.Duration, onFailover func(hacluster.Failover)) Leader {
	l := Leader{Kill: func(ctx context.Context) (time.Time, error) {
		old, err := c.KillLeader(ctx)
		killed := time.Now()
		if err != nil {
			return killed, err
		}
		f, err := c.WaitFailover(ctx, old, failoverTimeout)
		if onFailover != nil {
			onFailover(f)
		}
		return killed, err
	}}
	if stall {
		l.Stall = c.StallReplication
	}
	return l
}

// Report is what one run through a failover showed.
type Report struct {
	History *chaos.History
	Result  chaos.Result
	// KillNs is when the leader was dead, as an offset of the history;
	// KillStartNs when Leader.Kill was called.
	KillNs, KillStartNs int64
	// StallNs is when replication was stalled (0: it was not).
	StallNs int64
	// LastOKNs is the end of the last acknowledged transfer before the
	// leader was dead (-1: none), FirstOKNs the end of the first
	// acknowledged transfer that started after (-1: none).
	LastOKNs, FirstOKNs int64
	// Acknowledged counts the transfers clients were told succeeded
	// (first answers, not replays).
	Acknowledged int
	// AckLost and KeysLost are the checker's acknowledged-missing and
	// key-lost violations.
	AckLost, KeysLost int
}

// Unavailable is how long no transfer was acknowledged around the kill:
// from the last before it to the first that started after it. With a
// stall first, a synchronous primary acknowledged nothing during the
// stall, and that is unavailability too.
func (r *Report) Unavailable() time.Duration {
	if r.LastOKNs < 0 || r.FirstOKNs < 0 {
		return -1
	}
	return time.Duration(r.FirstOKNs - r.LastOKNs)
}

// String is the report in one line.
func (r *Report) String() string {
	s := fmt.Sprintf("%d intents, %d transfers acknowledged; ", len(r.History.Intents), r.Acknowledged)
	if r.StallNs > 0 {
		s += fmt.Sprintf("replication stalled %s before the leader was dead (%s until %d commits, then %s killing it); ",
			time.Duration(r.KillNs-r.StallNs).Round(time.Millisecond), time.Duration(r.KillStartNs-r.StallNs).Round(time.Millisecond),
			StallCommits, time.Duration(r.KillNs-r.KillStartNs).Round(time.Millisecond))
	}
	s += fmt.Sprintf("unavailable %s; acknowledged transfers lost %d, keys lost %d; %d violations",
		r.Unavailable().Round(time.Millisecond), r.AckLost, r.KeysLost, len(r.Result.Violations))
	if len(r.Result.Violations) > 0 {
		var kinds []string
		for _, k := range chaos.Kinds() {
			if n := r.Result.ByKind[k]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			}
		}
		s += " (" + strings.Join(kinds, ", ") + ")"
	}
	return s
}

// Run runs cfg on a fresh bank on srv (a server at the cluster's
// multi-host URL) and kills the leader at the moment the seed picks
// (cfg.KillPostgres is set for it). The error is for a run that could not
// happen; what the failover lost is in the Report.
func Run(ctx context.Context, srv *postgres.Server, cfg chaos.Config, leader Leader) (*Report, error) {
	db, err := banks.OnServer(srv, banks.Options{}).NewBank(ctx, "ha")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	cfg.KillPostgres = true
	pool, err := chaos.PoolFor(ctx, db.Pool, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	var called, stalled, killing, killed time.Time
	began := time.Now()
	crash := func(ctx context.Context) error {
		called = time.Now()
		if leader.Stall != nil {
			resume, err := leader.Stall(ctx)
			if err != nil {
				return fmt.Errorf("stalling replication: %w", err)
			}
			defer resume()
			stalled = time.Now()
			if _, err := waitCommits(ctx, db.Pool); err != nil {
				return fmt.Errorf("%w; the stall began %s into the run", err, stalled.Sub(began).Round(time.Millisecond))
			}
		}
		var err error
		killing = time.Now()
		killed, err = leader.Kill(ctx)
		return err
	}
	h, err := chaos.RunWith(ctx, pool, cfg, chaos.Options{CrashPostgres: crash})
	if err != nil {
		return nil, err
	}
	if len(h.Crashes) != 1 {
		return nil, fmt.Errorf("the run killed the leader %d times, want once", len(h.Crashes))
	}
	at := h.Crashes[0].AtNs
	r := &Report{History: h, Result: chaos.Check(h), KillNs: at + killed.Sub(called).Nanoseconds(),
		KillStartNs: at + killing.Sub(called).Nanoseconds()}
	if !stalled.IsZero() {
		r.StallNs = at + stalled.Sub(called).Nanoseconds()
	}
	r.measure()
	r.AckLost, r.KeysLost = r.Result.ByKind[chaos.KindAckMissing], r.Result.ByKind[chaos.KindKeyLost]
	return r, nil
}

// measure finds the acknowledged transfers around the kill.
func (r *Report) measure() {
	r.LastOKNs, r.FirstOKNs = -1, -1
	for _, in := range r.History.Intents {
		for _, a := range in.Attempts {
			if a.Seen != chaos.SeenOK || a.Replayed || a.Lookup {
				continue
			}
			r.Acknowledged++
			if a.EndNs <= r.KillNs && a.EndNs > r.LastOKNs {
				r.LastOKNs = a.EndNs
			}
			if a.StartNs >= r.KillNs && (r.FirstOKNs < 0 || a.EndNs < r.FirstOKNs) {
				r.FirstOKNs = a.EndNs
			}
		}
	}
}

// waitCommits waits until the primary has StallCommits commits the
// standby does not have: transfers committed since it was called (an
// asynchronous standby), or sessions waiting for a synchronous one. It
// returns how many it saw.
func waitCommits(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, stallTimeout,
		fmt.Errorf("replication stalled, but the primary did not make %d commits within %s", StallCommits, stallTimeout))
	defer cancel()
	base, err := countTransfers(ctx, pool)
	if err != nil {
		return 0, err
	}
	return waitCommitsSince(ctx, pool, base)
}

// countTransfers counts the transfers the primary has.
func countTransfers(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM transfers").Scan(&n); err != nil {
		return 0, fmt.Errorf("counting transfers: %w", err)
	}
	return n, nil
}

// waitCommitsSince is waitCommits from base transfers on.
func waitCommitsSince(ctx context.Context, pool *pgxpool.Pool, base int) (int, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, stallTimeout,
		fmt.Errorf("replication stalled, but the primary did not make %d commits within %s", StallCommits, stallTimeout))
	defer cancel()
	for {
		var n, waiting int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM transfers),
			(SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep')`).Scan(&n, &waiting)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return 0, cause
			}
			return 0, fmt.Errorf("counting commits during the stall: %w", err)
		}
		if n-base+waiting >= StallCommits {
			return n - base + waiting, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%d transfers committed, %d sessions waiting for the standby; the bank's sessions: %s)",
				context.Cause(ctx), n-base, waiting, sessions(pool))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sessions says what the bank's sessions are doing, for an error message.
func sessions(pool *pgxpool.Pool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT coalesce(state, '?') || coalesce(' on ' || wait_event_type || ':' || wait_event, ''), count(*)
		FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' GROUP BY 1 ORDER BY 2 DESC`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var what string
		var n int
		if err := rows.Scan(&what, &n); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, what))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
