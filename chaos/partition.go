package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults/netns"
	"github.com/jackc/pgx/v5/pgxpool"
)

// saltPartition keeps the partition's draws apart from the run's others.
const saltPartition = 0x7061727469

// What a PartitionPlan cuts.
const (
	// PartitionApp: every server copy's link to PostgreSQL.
	PartitionApp = "app"
	// PartitionStandby: the primary's link to its standby, before a
	// failover (Config.Failover).
	PartitionStandby = "standby"
)

// PartitionPlan is what a partitioned run was asked to do: what it cuts,
// how many times, for how long, and when (at the start of the seeded
// intents, or right after the first commit after each).
type PartitionPlan struct {
	Of          string        `json:"of"`
	Cuts        int           `json:"cuts,omitempty"`
	For         time.Duration `json:"forNs,omitempty"`
	AfterCommit bool          `json:"afterCommit,omitempty"`
	// Loss and Delay hold on the cut links all along (Partition's).
	Loss  float64       `json:"loss,omitempty"`
	Delay time.Duration `json:"delayNs,omitempty"`
}

// At are the intents whose start cuts, for a run of cfg (PartitionAt).
func (p PartitionPlan) At(cfg Config) []int {
	return PartitionAt(cfg.Seed, cfg.WithDefaults().Intents, p.Cuts)
}

// Partition cuts the links between an HTTP run's server copies and
// PostgreSQL (faults/netns) at seeded intents, each time for For, and
// heals them; Delay and Loss hold on the links all along. Its Options
// wire it into a run; Cuts says what it did.
type Partition struct {
	// Links are the links it cuts: each copy's link to PostgreSQL.
	Links []*netns.Link
	// At are the intents whose start cuts the links (PartitionAt).
	At []int
	// For is how long each cut lasts.
	For time.Duration
	// Delay and Loss are the links' netem all along (each direction).
	Delay time.Duration
	Loss  float64
	// AfterCommit moves each cut from the start of its intent to the
	// first transfer that commits after it: the server that committed
	// cuts the links before it does anything more, as a partition that
	// strikes between a COMMIT and what follows it. What a handler does
	// after its commit (its answer, or a second transaction) then meets
	// the partition every time, not by luck.
	AfterCommit bool
	// DB is the run's own way to PostgreSQL (not through the links): the
	// wait for the cut-off servers' transactions to end reads it.
	DB bank.DB

	mu    sync.Mutex
	armed []int // AfterCommit: intents whose start asked for a cut
	// healing: healAll has begun, no more cuts.
	healing bool
	cuts    []CutRecord
	timers  sync.WaitGroup
	err     error
}

// CutRecord is one cut as it happened: the intent whose start cut the
// links, and when they were cut and healed.
type CutRecord struct {
	Intent int       `json:"intent"`
	Cut    time.Time `json:"cut"`
	Healed time.Time `json:"healed"`
	// CutNs and HealedNs are the same as offsets from the start of the
	// run, as the attempts' are (the history fills them in).
	CutNs    int64 `json:"cutNs"`
	HealedNs int64 `json:"healedNs"`
}

// Failed counts the fault-phase attempts that began while c lasted and
// got no final answer (no answer at all, or a 5xx): what the cut cost the
// clients. (A 409 for a key whose cut-off holder still has it counts
// too: the client cannot know.)
func (c CutRecord) Failed(h *History) int {
	n := 0
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			if a.Phase == PhaseFault && a.Seen == SeenUnknown && a.StartNs >= c.CutNs && a.StartNs < c.HealedNs {
				n++
			}
		}
	}
	return n
}

// PartitionAt draws n intents of a run of intents, one in each n-th of its
// middle, from the seed: the moments a partition cuts.
func PartitionAt(seed uint64, intents, n int) []int {
	if n <= 0 || intents <= 0 {
		return nil
	}
	span := max(intents/n, 1)
	at := make([]int, n)
	for j := range at {
		at[j] = j*span + span/4 + rng(seed, saltPartition, uint64(j), 0).IntN(max(span/2, 1))
	}
	return at
}

// Start puts the links' delay and loss on, if any (delay needs netem,
// which some kernels lack: netns.ErrNoNetem; loss needs nft:
// netns.ErrNoNft).
func (p *Partition) Start() error {
	if p.Delay == 0 && p.Loss == 0 {
		return nil
	}
	for _, l := range p.Links {
		if p.Delay > 0 {
			if err := l.Delay(p.Delay); err != nil {
				return err
			}
		}
		if p.Loss > 0 {
			if err := l.Loss(p.Loss); err != nil {
				return err
			}
		}
	}
	return nil
}

// Options sets o's AtIntent and BeforeHeal to cut and heal.
func (p *Partition) Options(o *Options) {
	o.AtIntent = p.atIntent
	o.BeforeHeal = p.healAll
	o.Cuts = p.Cuts
	if p.AfterCommit {
		o.AfterCommit = p.afterCommit
	}
}

func (p *Partition) atIntent(_ context.Context, i int) {
	for _, at := range p.At {
		if at != i {
			continue
		}
		if p.AfterCommit {
			p.mu.Lock()
			p.armed = append(p.armed, i)
			p.mu.Unlock()
			continue
		}
		p.cut(i)
	}
}

// afterCommit cuts for the oldest armed intent, on the goroutine of the
// server that has just committed: it goes on once the links are down.
func (p *Partition) afterCommit(context.Context) {
	p.mu.Lock()
	if len(p.armed) == 0 {
		p.mu.Unlock()
		return
	}
	i := p.armed[0]
	p.armed = p.armed[1:]
	p.mu.Unlock()
	p.cut(i)
}

// cut cuts the links for intent i and heals them For later; nothing once
// healAll has begun.
func (p *Partition) cut(i int) {
	p.mu.Lock()
	if p.healing {
		p.mu.Unlock()
		return
	}
	rec := len(p.cuts)
	p.cuts = append(p.cuts, CutRecord{Intent: i, Cut: time.Now()})
	p.timers.Add(1) // under mu: healAll's Wait cannot miss it
	p.mu.Unlock()
	p.set((*netns.Link).Cut)
	time.AfterFunc(p.For, func() {
		defer p.timers.Done()
		p.set((*netns.Link).Heal)
		p.mu.Lock()
		p.cuts[rec].Healed = time.Now()
		p.mu.Unlock()
	})
}

func (p *Partition) set(f func(*netns.Link) error) {
	for _, l := range p.Links {
		if err := f(l); err != nil {
			p.mu.Lock()
			p.err = errors.Join(p.err, err)
			p.mu.Unlock()
		}
	}
}

// strandedWait bounds the wait for the transactions the cut-off servers
// left open in PostgreSQL: they end once their connections' FIN or RST
// crosses the healed link, at the next TCP retransmission.
const strandedWait = time.Minute

// healAll waits for every cut's heal, then for PostgreSQL to see the end of
// every transaction a cut-off server left open, so that healing starts on
// a database where only live requests hold locks.
func (p *Partition) healAll(ctx context.Context) error {
	p.mu.Lock()
	p.armed = nil // a cut no commit triggered never happens
	p.healing = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.timers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(p.For + strandedWait):
		return fmt.Errorf("partition: the cuts were not healed within %s", p.For+strandedWait)
	}
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.waitStranded(ctx)
}

// Stranded counts the sessions that servers on the links have open in
// PostgreSQL inside a transaction (or running a statement) for more than a
// second: what a cut leaves behind until its connections' ends cross.
func (p *Partition) Stranded(ctx context.Context) (int, error) {
	var nets []string
	for _, l := range p.Links {
		nets = append(nets, netip.PrefixFrom(l.AddrB(), 32).String())
	}
	var n int
	err := p.DB.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE client_addr <<= ANY ($1::inet[]) AND state <> 'idle'
		  AND coalesce(xact_start, query_start) < now() - interval '1 second'`, nets).Scan(&n)
	return n, err
}

func (p *Partition) waitStranded(ctx context.Context) error {
	deadline := time.Now().Add(strandedWait)
	for {
		n, err := p.Stranded(ctx)
		if err != nil {
			return fmt.Errorf("partition: counting the cut-off servers' sessions: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("partition: %d sessions of cut-off servers still open in PostgreSQL %s after the last heal", n, strandedWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Cuts are the cuts so far.
func (p *Partition) Cuts() []CutRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]CutRecord(nil), p.cuts...)
}

// NamespacedHost is a Host in node: it listens on listen (an address of
// the node's) and reaches the database at dbURL through dbAddr, the
// database's address on the node's link, dialling from inside the node.
// conns bounds its pool; each connection attempt is bounded by
// connectTimeout, since a cut link answers nothing.
func NamespacedHost(ctx context.Context, node *netns.Node, listen, dbAddr netip.Addr, dbURL string, conns int32, connectTimeout, work time.Duration) (Host, *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return Host{}, nil, err
	}
	cfg.ConnConfig.Host = dbAddr.String()
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	cfg.ConnConfig.DialFunc = node.DialContext
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	cfg.MaxConns, cfg.MinConns = conns, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Host{}, nil, err
	}
	// Connected before the run: a new session costs a fork and its
	// catalog caches in PostgreSQL, which on a loaded machine is most of a
	// work timeout.
	conns32 := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			for _, c := range conns32 {
				c.Release()
			}
			pool.Close()
			return Host{}, nil, fmt.Errorf("connecting to PostgreSQL at %s from %s: %w", dbAddr, node.Name(), err)
		}
		conns32 = append(conns32, c)
	}
	for _, c := range conns32 {
		c.Release()
	}
	addr := net.JoinHostPort(listen.String(), strconv.Itoa(0))
	return Host{
		DB:          pool,
		Listen:      func() (net.Listener, error) { return node.Listen("tcp", addr) },
		WorkTimeout: work,
	}, pool, nil
}
