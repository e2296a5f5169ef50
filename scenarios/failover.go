package scenarios

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// InvSurvivesFailover is the failover story's own invariant: every transfer
// a client was told had succeeded is still in the ledger after the
// failover, and so is its key. The five invariants cannot see the loss once
// the story has finished: the promoted standby never saw the lost
// transfer's id either, so the resend's new transfer takes the same id, and
// the ledger at the end looks like one honest transfer.
const InvSurvivesFailover = "acknowledged transfers survive a failover"

// Lanes of the failover story's pictures: the two PostgreSQL servers, beside
// the app server ("server") and the database it works in.
const (
	lanePrimary = "primary"
	laneStandby = "standby"
)

// Ada's transfer is acknowledged by the primary; the primary dies before
// the standby has it; the standby is promoted, and Ada's app resends with
// the same key.
func init() {
	Register(Scenario{
		Name:    "failover",
		Title:   "A failover that forgets",
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "the primary acknowledges ₦10,000 and dies before its standby has it: the promoted standby has neither transfer nor key, and the resend moves the money again; with synchronous replication it is replayed",
		Explain: Explanation{
			Shows: "bank-sim starts two PostgreSQL servers: a primary, and a standby that streams the primary's " +
				"WAL. The app connects as production apps do, through one multi-host URL " +
				"(host=primary,standby target_session_attrs=read-write). The standby falls behind — here its " +
				"WAL receiver is stopped, so that it certainly does; in production a network blip or a busy " +
				"standby does it for a few milliseconds or seconds. Ada sends ₦10,000 to Bola and gets 201. " +
				"The primary dies (SIGKILL), the standby is promoted, the app reconnects to it, and Ada's app " +
				"resends the request with the same key, as a careful app does after an outage.",
			Breaks: "An idempotency key is exactly as durable as the transaction that stored it. With " +
				"asynchronous replication (PostgreSQL's default) the primary acknowledges a commit as soon as " +
				"its own WAL has it; the standby gets it a moment later — or, if the primary dies in that " +
				"moment, never. The promoted standby has neither Ada's transfer nor her key: the bank told her " +
				"“success” for a transfer it no longer has, and her resend, which the key should have made " +
				"harmless, finds no key and moves the money again. (Even the transfer's id comes back: the " +
				"standby never saw the sequence advance, so the new transfer is number 1 again.)",
			Defence: "Synchronous replication: the primary holds each commit's answer until the standby " +
				"confirms it (synchronous_standby_names names the standby; synchronous_commit = on waits " +
				"until it has flushed the WAL, remote_apply until it has applied it). Then nothing " +
				"acknowledged is lost by promoting that standby: the key survives with the transfer, and " +
				"Ada's resend is replayed — the original 201, the original transfer id. The idempotency code " +
				"does not change at all; the database's durability does.",
			SQL: "-- on the primary (postgresql.conf, or ALTER SYSTEM and a reload):\n" +
				"synchronous_standby_names = 'standby'  -- its application_name\n" +
				"synchronous_commit = remote_apply       -- or on: flushed there\n" +
				"-- the app, through whichever server accepts writes:\n" +
				"-- host=h1,h2 port=p1,p2 target_session_attrs=read-write",
			Cost: "Every commit waits for the standby: a round trip, and with remote_apply the standby's " +
				"replay too. Measured here, both servers on one 2-core machine shared with other work, " +
				"single-row INSERTs (BANK_SIM_EXHAUSTIVE=1 go test -run TestPairCosts ./postgres/): about " +
				"0.1–0.4 ms a commit asynchronously, 0.5–2 ms with on, 0.8–1.9 ms with remote_apply. " +
				"Between machines every commit also pays the network's round trip (0.1–1 ms within a data " +
				"centre, tens of ms across regions). And the primary now depends on its standby: while the " +
				"standby is not receiving, commits wait — the protected run shows one waiting — so production " +
				"runs two standbys and waits for either (synchronous_standby_names = 'ANY 1 (s1, s2)').",
		},
		OwnServers: true,
		Prepare:    startFailoverPairs,
		Phases: []Phase{{
			Title:   "without protection: asynchronous replication, PostgreSQL's default",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return failoverStory(ctx, r, false)
			},
		}, {
			Title: "with protection: synchronous replication, each commit waits for the standby",
			Run: func(ctx context.Context, r *Run) error {
				return failoverStory(ctx, r, true)
			},
		}},
	})
}

// failoverTimeout bounds a phase's every wait on the pair: long enough to
// mean "hung" on a loaded machine.
const failoverTimeout = time.Minute

// failoverDB is the database the story's bank is made in, on the primary:
// postgres, which every cluster has, so that no CREATE DATABASE (a copy of
// template1 through the WAL, replayed by the standby too) is paid for.
const failoverDB = "postgres"

// failoverPairs are the story's pairs, one for each phase that runs,
// started as the story starts: the second starts while the first phase
// runs, not after it. A phase takes its own (take); release
// stops what no phase took and waits until every pair has stopped.
type failoverPairs struct {
	pending map[bool]*pendingPair // by protected
	closing sync.WaitGroup
}

// pendingPair is a pair being started, with its bank, for one phase.
type pendingPair struct {
	ready chan struct{} // closed once pair or err is set
	pair  *postgres.Pair
	err   error
	taken bool
}

// startFailoverPairs is the story's Prepare: it starts a pair for each
// phase that will run, each with the lesson's bank on its primary, one
// after the other in the background: the second while the first phase
// runs, which spends most of its time waiting on its servers. Started at
// once, the two would share the CPU, and the first phase would wait for
// both.
func startFailoverPairs(ctx context.Context, o Options) (any, func()) {
	fp := &failoverPairs{pending: map[bool]*pendingPair{}}
	var order []bool
	for _, protected := range []bool{false, true} {
		if !protected && o.SkipControls {
			continue
		}
		fp.pending[protected] = &pendingPair{ready: make(chan struct{})}
		order = append(order, protected)
	}
	go func() {
		for _, protected := range order {
			p := fp.pending[protected]
			p.pair, p.err = startFailoverPair(ctx, failoverSync(protected, o.Bug))
			close(p.ready)
		}
	}()
	return fp, fp.release
}

// failoverSync says whether a phase's pair replicates synchronously: the
// protected phase's does, unless it runs with the async-replication
// mistake, whose protected phase's expectations (nothing acknowledged
// lost, the resend replayed) are then what catch it.
func failoverSync(protected bool, bug *mistakes.Bug) bool {
	return protected && (bug == nil || !bug.AsyncReplication)
}

// startFailoverPair starts a pair and makes the lesson's bank on its
// primary.
func startFailoverPair(ctx context.Context, sync bool) (*postgres.Pair, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*failoverTimeout)
	defer cancel()
	pair, err := postgres.StartPair(ctx, postgres.Options{}, postgres.PairOptions{Sync: sync})
	if err != nil {
		return nil, err
	}
	if err := pair.Fill(ctx, failoverDB, banks.Template); err != nil {
		pair.Close()
		return nil, err
	}
	return pair, nil
}

// take waits for the phase's pair; the phase owns it from then on.
func (fp *failoverPairs) take(ctx context.Context, protected bool) (*postgres.Pair, error) {
	p := fp.pending[protected]
	if p == nil {
		return nil, errors.New("no pair was started for this phase")
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.taken = p.err == nil
	return p.pair, p.err
}

// closeLater stops a phase's pair without holding up the next phase;
// release waits for it.
func (fp *failoverPairs) closeLater(pair *postgres.Pair) {
	fp.closing.Add(1)
	go func() {
		defer fp.closing.Done()
		pair.Close()
	}()
}

// release stops the pairs no phase took (a story cut short) and returns
// once every pair of the story has stopped and its clusters are deleted.
func (fp *failoverPairs) release() {
	for _, p := range fp.pending {
		<-p.ready
		if p.err == nil && !p.taken {
			fp.closeLater(p.pair)
		}
	}
	fp.closing.Wait()
}

// failoverStory runs the story's phase; protected is the phase with the
// defence.
func failoverStory(ctx context.Context, r *Run, protected bool) error {
	sync := failoverSync(protected, r.bug)
	pctx, cancel := context.WithTimeout(ctx, 2*failoverTimeout)
	defer cancel()
	fp, _ := r.Prepared().(*failoverPairs)
	var pair *postgres.Pair
	var err error
	closePair := func() { pair.Close() }
	if fp != nil {
		pair, err = fp.take(pctx, protected)
		closePair = func() { fp.closeLater(pair) }
	} else {
		pair, err = startFailoverPair(pctx, sync)
	}
	if err != nil {
		return err
	}
	const dbName = failoverDB
	cfg, err := pgxpool.ParseConfig(pair.URL(dbName))
	if err != nil {
		closePair()
		return err
	}
	cfg.MaxConns = banks.PoolSize
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err != nil {
		closePair()
		return fmt.Errorf("%w: %v", postgres.ErrUnavailable, err)
	}
	r.UseDB(pool, func() {
		pool.Close()
		closePair()
	})
	primaryPort, standbyPort := pair.Ports()
	primaryPID, standbyPID := pair.PIDs()
	how := "asynchronous: the primary acknowledges a commit once its own WAL has it"
	if sync {
		how = "synchronous: the primary acknowledges a commit once the standby has applied it"
	}
	r.Step("a primary and a standby that streams from it; the app connects through host=primary,standby target_session_attrs=read-write")
	if protected && !sync {
		r.Step("with the mistake %s the standby is replicated asynchronously after all", r.bug.Name)
	}
	r.ServerAt("server", "its pool connects through host=127.0.0.1,127.0.0.1 port=%d,%d target_session_attrs=read-write", primaryPort, standbyPort)
	r.DatabaseAt(lanePrimary)
	r.ServerAt(lanePrimary, "127.0.0.1:%d (postmaster %d); replication is %s", primaryPort, primaryPID, how)
	r.ServerAt(laneStandby, "127.0.0.1:%d (postmaster %d), a hot standby streaming from the primary through a replication slot", standbyPort, standbyPID)
	if err := pair.WaitReplayed(pctx); err != nil {
		return err
	}
	r.ServerAt(laneStandby, "has replayed everything so far: the bank and its three accounts")

	if err := pair.StopReceiving(pctx); err != nil {
		return err
	}
	r.Step("the standby falls behind: its WAL receiver stops (in production a network blip or a busy standby)")
	r.emit(Event{Kind: KindFault, Lane: laneStandby, Fault: "standby-lag", Text: "WAL receiver stopped: nothing the primary writes reaches the standby"})

	h := r.Handler(nil)
	// The commit may wait for the standby as long as the story does.
	h.WorkTimeout = failoverTimeout
	net := r.Network(h, nil)
	in := r.AdaTap("ada-pays-bola")
	r.Step("Ada sends %s to Bola with key %s", bank.Naira(in.Request.AmountKobo), in.Key)
	var first bank.Response
	if !sync {
		first, err = r.Send(pctx, net, in, 1, "")
		if err != nil {
			return err
		}
	} else {
		// The same lag, but the primary must wait for the standby: the
		// answer is held until the standby receives again.
		answered := make(chan error, 1)
		go func() {
			var err error
			first, err = r.Send(pctx, net, in, 1, "")
			answered <- err
		}()
		if err := waitSyncRep(pctx, pair, dbName); err != nil {
			return err
		}
		select {
		case err := <-answered:
			r.Expect(false, "the answer waits while the standby is not receiving (it came: %v)", err)
		default:
			r.Step("no answer yet: the primary holds the commit until the standby has it")
			r.ServerAt(lanePrimary, "the commit waits for the standby (wait event SyncRep)")
		}
		if err := pair.Receive(pctx); err != nil {
			return err
		}
		r.ServerAt(laneStandby, "WAL receiver streams again; the standby applies the commit and confirms it")
		r.Step("the standby receives again and applies the commit; only then does the primary let the answer go")
		if _, err := waitFor(pctx, answered, failoverTimeout, "Ada's answer once the standby received again"); err != nil {
			return err
		}
	}
	rc, _ := first.Receipt()
	r.Expect(first.Status == 201 && !first.Replayed, "Ada is told 201: transfer %d", rc.TransferID)

	// The bank is in the standby's database postgres, where the pair's
	// own connection is.
	var standbyHas bool
	if err := pair.OnStandby(pctx, func(conn *pgx.Conn) error {
		standbyHas, err = keyAndTransfer(pctx, conn, in, rc.TransferID)
		return err
	}); err != nil {
		return err
	}
	if standbyHas {
		r.ServerAt(laneStandby, "already has transfer %d and key %s", rc.TransferID, in.Key)
	} else {
		r.ServerAt(laneStandby, "has neither transfer %d nor key %s: it never received them", rc.TransferID, in.Key)
	}

	r.Step("the primary dies (kill -9) and the standby is promoted")
	killed := time.Now()
	if err := pair.KillPrimary(pctx); err != nil {
		return err
	}
	r.emit(Event{Kind: KindFault, Lane: lanePrimary, Fault: "kill-primary", Text: fmt.Sprintf("kill -9: postmaster %d and its backends are gone", primaryPID)})
	// Its connections are dead: the pool drops them, and opens new ones
	// through the multi-host URL.
	pool.Reset()
	if err := pair.Promote(pctx); err != nil {
		return err
	}
	r.ServerAt(laneStandby, "promoted (pg_promote): accepts writes, %s after the kill", Dur(time.Since(killed)))
	// The app's own pool: where its next connection lands is where Ada's
	// resend will be served.
	var port int
	var readOnly string
	if err := pool.QueryRow(pctx, "SELECT inet_server_port(), current_setting('transaction_read_only')").Scan(&port, &readOnly); err != nil {
		return fmt.Errorf("%w: the app's pool after the failover: %v", postgres.ErrUnavailable, err)
	}
	r.ServerAt("server", "reconnects through the multi-host URL: lands on 127.0.0.1:%d (transaction_read_only %s), %s after the kill", port, readOnly, Dur(time.Since(killed)))
	r.Expect(port == standbyPort && readOnly == "off", "the app's multi-host URL now reaches the promoted standby")
	if port == standbyPort {
		r.DatabaseAt(laneStandby)
	}

	// What the bank has now, before anyone sends anything again.
	survived, err := keyAndTransfer(pctx, pool, in, rc.TransferID)
	if err != nil {
		return err
	}
	detail := fmt.Sprintf("Ada was told transfer %d; after the failover the bank still has it, and key %s with it", rc.TransferID, in.Key)
	if !survived {
		detail = fmt.Sprintf("Ada was told transfer %d succeeded, but after the failover the bank has neither the transfer nor key %s", rc.TransferID, in.Key)
	}
	r.Invariant(InvSurvivesFailover, survived, detail)
	if survived {
		r.Step("the promoted standby has transfer %d and key %s: nothing acknowledged was lost", rc.TransferID, in.Key)
	} else {
		r.Step("the promoted standby has neither transfer %d nor key %s: the bank lost a transfer it had confirmed", rc.TransferID, in.Key)
	}
	if protected {
		r.Expect(survived, "after the failover the bank still has transfer %d and key %s", rc.TransferID, in.Key)
	} else {
		r.Expect(!survived, "after the failover transfer %d and key %s are gone", rc.TransferID, in.Key)
		r.ExpectBalances(pctx, 5_000_000, 500_000, 2_000_000)
	}

	r.Step("Ada's app resends the request with the same key, as a careful app does after an outage")
	again, err := r.Send(pctx, net, in, 2, "resend after the failover")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	rc2, _ := again.Receipt()
	if again.Status == 201 && !again.Replayed {
		r.Step("not a replay: with the key gone, the bank moves %s again (as transfer %d: the standby never saw the first one take that number)",
			bank.Naira(rc2.AmountKobo), rc2.TransferID)
	}
	if protected {
		r.Expect(again.Status == 201 && again.Replayed && rc2.TransferID == rc.TransferID,
			"the resend is replayed: 201, transfer %d, the original answer", rc.TransferID)
	} else {
		r.Expect(again.Status == 201 && !again.Replayed,
			"the resend is a new 201, not a replay: with its key gone, the money moves again (transfer %d)", rc2.TransferID)
	}
	r.ExpectBalances(pctx, 5_000_000-in.Request.AmountKobo, 500_000+in.Request.AmountKobo, 2_000_000)
	r.ExpectTransfers(pctx, 1)
	return nil
}

// waitSyncRep waits until a backend of db on the primary waits for the
// standby's confirmation of its commit.
func waitSyncRep(ctx context.Context, pair *postgres.Pair, db string) error {
	deadline := time.Now().Add(failoverTimeout)
	return pair.OnPrimary(ctx, func(conn *pgx.Conn) error {
		for {
			// The pair's own connection is in db too, and never waits.
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'SyncRep'", db).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("waited %s for Ada's commit to wait for the standby (wait event SyncRep on the primary)", failoverTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
}

// keyAndTransfer reports whether the server db reaches has both the
// transfer Ada was told about (its id, for her intent) and her key,
// completed.
func keyAndTransfer(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, in Intent, transferID int64) (bool, error) {
	var transfers, keys int
	err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM transfers WHERE id = $1 AND intent = $2),
		(SELECT count(*) FROM idempotency_keys WHERE user_id = $3 AND key = $4 AND status = 'completed')`,
		transferID, in.Label, in.UserID, in.Key).Scan(&transfers, &keys)
	if err != nil {
		return false, err
	}
	return transfers == 1 && keys == 1, nil
}
