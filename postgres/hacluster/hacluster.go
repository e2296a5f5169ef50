// Package hacluster runs a local pg_auto_failover formation for a test: a
// monitor and two data nodes (a primary and its standby), each a
// `pg_autoctl run` supervising its own PostgreSQL, all on 127.0.0.1, in a
// temporary directory that Stop removes. StartPatroni (patroni.go) runs
// the other engine the tests compare, Patroni with etcd, by the same rules.
//
// # Why pg_auto_failover
//
// Of the two HA engines Debian packages, pg_auto_failover needs one binary
// (pg_autoctl) and a PostgreSQL extension; Patroni needs Python and a
// distributed store (etcd) besides, three more processes to start, watch
// and kill. Both are run in production; pg_auto_failover's synchronous
// setting is one switch per standby (replication-quorum), which is what
// the test turns off and on, and its monitor is a PostgreSQL database
// whose table (pgautofailover.node) says who is primary.
//
// # What "kill the leader" means
//
// KillLeader kills every process of the primary's node with SIGKILL: its
// pg_autoctl (the supervisor and its services), its postmaster and every
// backend, walsender and auxiliary process, frozen first with SIGSTOP so
// that none of them does anything between the first kill and the last, as
// when the machine loses power. Killing less is not a failover: a
// postmaster killed alone is restarted in place by its pg_autoctl (bank-sim
// chaos --kill-postgres tests that crash), and a pg_autoctl killed alone
// leaves its PostgreSQL serving, whose health checks pass, so the monitor
// keeps it primary.
//
// # Timeouts
//
// The monitor's health checks and its wait for a failed primary to demote
// itself (primary_demote_timeout, 30 s by default) are shortened, so that a
// failover takes seconds instead of half a minute: safe here only because
// the old primary is known to be dead. Production keeps the defaults,
// which is what protects against two primaries when the old one is only
// cut off. fsync is off: the test kills processes, never the machine, and
// the kernel keeps what they wrote.
//
// # Leftovers
//
// Each cluster lives in $TMPDIR/bank-sim-ha-*, which holds a lock file its
// process keeps locked. Every process is started with a parent-death
// signal (SIGTERM to pg_autoctl, which then stops its PostgreSQL), so a
// killed test leaves no server running, only the directory; Prune removes
// the directories whose lock nobody holds and that carry bank-sim's mark,
// and kills the processes still running that bank-sim recorded when it
// started them (record.go), with their descendants, and the postmasters
// a killed agent left running on their data directories (postmaster.go).
package hacluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled says that pg_auto_failover is missing, and how to get it.
var ErrNotInstalled = errors.New("pg_auto_failover not installed: apt-get install postgresql-15-auto-failover pg-auto-failover-cli")

// Names of the formation's nodes, in the order they are created.
const (
	MonitorName = "monitor"
	dirPrefix   = "bank-sim-ha-"
	lockName    = "bank-sim-ha.lock"
)

// Options configure a cluster.
type Options struct {
	// Sync makes the standby synchronous (pg_auto_failover's
	// replication-quorum true, its default): the primary acknowledges a
	// commit once the standby has it. Off, the standby is asynchronous.
	Sync bool
	// Bin is the PostgreSQL installation (the parent of bin/); "" picks
	// the newest /usr/lib/postgresql/<major> with the extension.
	Bin string
	// StartTimeout bounds Start; 6 minutes when zero (2.5 were seen at
	// load 30 on 2 cores).
	StartTimeout time.Duration
	// Log, when set, receives every pg_autoctl's output.
	Log io.Writer
	// ProductionTimeouts keeps the monitor's default health checks and
	// demote timeout: failover then takes half a minute or more.
	ProductionTimeouts bool
}

// Node is one node of the formation.
type Node struct {
	Name string
	Port int
}

// Cluster is a running formation.
type Cluster struct {
	opts    Options
	bin     string
	dir     string
	lock    *os.File
	rec     *recorder // what it started, for prune
	cred    *syscall.Credential
	env     []string
	monitor *node
	nodes   []*node // data nodes

	// Startup is how long Start took, from nothing to a primary and a
	// streaming standby.
	Startup time.Duration
	// startEvent is the monitor's last event when Start returned: Events
	// are the ones after it.
	startEvent int64

	// tailMax is how much of each process's output is kept (8 KiB when
	// zero): a Patroni cluster keeps more, its evidence when a run fails.
	tailMax int

	mu      sync.Mutex
	stopped bool
	// runMu guards each node's run: a kill (KillLeader, Stop) may come
	// while another goroutine waits on the cluster.
	runMu sync.Mutex
}

type node struct {
	Node
	data string
	run  *proc // its pg_autoctl run (patroni, etcd)
	// out is the output of its last run, kept after a kill: evidence.
	out *tail
}

// Available says whether pg_auto_failover can run here: nil, or an error
// wrapping ErrNotInstalled that says what is missing.
func Available() error {
	_, err := findBin("")
	return err
}

// findBin returns the PostgreSQL installation to run, checking that
// pg_autoctl and the pgautofailover extension for it are installed.
func findBin(explicit string) (string, error) {
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		return "", fmt.Errorf("%w (pg_autoctl is not on PATH)", ErrNotInstalled)
	}
	has := func(dir string) bool {
		_, e1 := os.Stat(filepath.Join(dir, "bin", "pg_ctl"))
		_, e2 := os.Stat(filepath.Join(dir, "lib", "pgautofailover.so"))
		return e1 == nil && e2 == nil
	}
	if explicit != "" {
		if !has(explicit) {
			return "", fmt.Errorf("%w (%s has no bin/pg_ctl or no lib/pgautofailover.so)", ErrNotInstalled, explicit)
		}
		return explicit, nil
	}
	for major := 18; major >= 13; major-- {
		dir := fmt.Sprintf("/usr/lib/postgresql/%d", major)
		if has(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (no /usr/lib/postgresql/<major> has both bin/pg_ctl and lib/pgautofailover.so)", ErrNotInstalled)
}

// Start creates and starts a formation: monitor, primary, standby. It
// returns once the monitor sees the primary and the standby in their
// states and the primary's synchronous_standby_names is as Options.Sync
// asks; if that takes longer than StartTimeout it fails, saying what it
// was waiting for, and leaves nothing behind.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	began := time.Now()
	if o.StartTimeout <= 0 {
		o.StartTimeout = 6 * time.Minute
	}
	bin, err := findBin(o.Bin)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.StartTimeout,
		fmt.Errorf("the pg_auto_failover cluster did not come up within %s", o.StartTimeout))
	defer cancel()

	c := &Cluster{opts: o, bin: bin}
	if err := c.makeDir(""); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				err = fmt.Errorf("%w; and stopping what had started: %v", err, serr)
			}
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c.monitor = &node{Node: Node{Name: MonitorName, Port: ports[0]}, data: filepath.Join(c.dir, MonitorName)}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("node%d", i)
		c.nodes = append(c.nodes, &node{Node: Node{Name: name, Port: ports[i]}, data: filepath.Join(c.dir, name)})
	}

	// initdb without fsync, here rather than in pg_autoctl (which
	// syncs): the monitor's and the primary's at once.
	errs := make(chan error, 2)
	for _, n := range []*node{c.monitor, c.nodes[0]} {
		go func() {
			errs <- c.tool(ctx, "initdb", filepath.Join(bin, "bin", "initdb"), "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "-D", n.data)
		}()
	}
	if err := errors.Join(<-errs, <-errs); err != nil {
		return nil, err
	}

	pgctl := filepath.Join(bin, "bin", "pg_ctl")
	if err := c.tool(ctx, "pg_autoctl create monitor", "pg_autoctl", "create", "monitor", "--pgdata", c.monitor.data,
		"--pgport", strconv.Itoa(c.monitor.Port), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--auth", "trust", "--no-ssl", "--pgctl", pgctl); err != nil {
		return nil, err
	}
	if err := c.configure(c.monitor, c.monitorSettings()); err != nil {
		return nil, err
	}
	if err := c.runNode(c.monitor); err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, "the monitor to accept connections", func(ctx context.Context) (bool, error) {
		return c.ping(ctx, c.MonitorURL()) == nil, nil
	}); err != nil {
		return nil, err
	}

	quorum := strconv.FormatBool(o.Sync)
	for i, n := range c.nodes {
		if err := c.tool(ctx, "pg_autoctl create postgres ("+n.Name+")", "pg_autoctl", "create", "postgres", "--pgdata", n.data,
			"--pgport", strconv.Itoa(n.Port), "--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.Name,
			"--username", "postgres", "--dbname", "postgres", "--auth", "trust", "--no-ssl",
			"--monitor", c.MonitorURL(), "--pgctl", pgctl, "--replication-quorum", quorum, "--candidate-priority", "50"); err != nil {
			return nil, err
		}
		if err := c.configure(n, nodeSettings); err != nil {
			return nil, err
		}
		if err := c.runNode(n); err != nil {
			return nil, err
		}
		if i == 0 {
			// The standby's base backup is taken from a running primary.
			if err := c.waitStates(ctx, map[string]string{n.Name: "single"}); err != nil {
				return nil, err
			}
		}
	}
	if err := c.waitStates(ctx, map[string]string{c.nodes[0].Name: "primary", c.nodes[1].Name: "secondary"}); err != nil {
		return nil, err
	}
	// The primary applies the standby's replication-quorum once it is
	// primary; wait for it, so that the first transfer is already under
	// the setting.
	want := "synchronous_standby_names empty (asynchronous standby)"
	if o.Sync {
		want = "synchronous_standby_names set (synchronous standby)"
	}
	primaryURL := c.nodeURL(c.nodes[0])
	if err := c.waitFor(ctx, "the primary's "+want, func(ctx context.Context) (bool, error) {
		var names string
		if err := c.queryRow(ctx, primaryURL, "SHOW synchronous_standby_names", &names); err != nil {
			return false, nil
		}
		return (names != "") == o.Sync, nil
	}); err != nil {
		return nil, err
	}
	if err := c.queryRow(ctx, c.MonitorURL(), "SELECT coalesce(max(eventid), 0) FROM pgautofailover.event", &c.startEvent); err != nil {
		return nil, fmt.Errorf("reading the monitor's events: %v", err)
	}
	// pg_autoctl starts them, so they are its descendants while it runs;
	// recorded too, for prune to find one that outlived it.
	for _, n := range c.all() {
		if pm, err := procfs.ProvePostmaster(n.data, time.Time{}); err == nil && pm.PID > 0 {
			if err := c.rec.record(pm.PID, strings.Fields(procfs.Cmdline(pm.PID))); err != nil {
				return nil, fmt.Errorf("recording %s's postmaster in %s: %v", n.Name, procsName, err)
			}
		}
	}
	c.Startup = time.Since(began)
	return c, nil
}

// monitorSettings are the monitor's postgresql.conf lines: small, and
// (unless ProductionTimeouts) quick to declare a node dead.
func (c *Cluster) monitorSettings() string {
	s := nodeSettings
	if !c.opts.ProductionTimeouts {
		s += `pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 2000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 3000
pgautofailover.primary_demote_timeout = 3000
`
	}
	return s
}

// nodeSettings override pg_autoctl's tuning, which sizes shared_buffers
// for the whole machine (6 GB on a 24 GB one), for each of the three.
const nodeSettings = `shared_buffers = '32MB'
work_mem = '4MB'
maintenance_work_mem = '16MB'
effective_cache_size = '128MB'
max_connections = 100
fsync = off
`

const settingsMark = "# bank-sim's settings (they override pg_autoctl's)"

// configure appends settings to the node's postgresql.conf, after the line
// that includes pg_autoctl's, so that they win. A standby's copy of the
// primary's file has them already.
func (c *Cluster) configure(n *node, settings string) error {
	file := filepath.Join(n.data, "postgresql.conf")
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %v", n.Name, err)
	}
	if bytes.Contains(b, []byte(settingsMark)) {
		return nil
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("%s: %v", n.Name, err)
	}
	_, err = fmt.Fprintf(f, "\n%s\n%s", settingsMark, settings)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// URL is the formation's connection string for clients: both data nodes,
// and target_session_attrs=read-write, so that a connection reaches
// whichever is primary.
func (c *Cluster) URL() string {
	var hosts, ports []string
	for _, n := range c.nodes {
		hosts = append(hosts, "127.0.0.1")
		ports = append(ports, strconv.Itoa(n.Port))
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=5",
		strings.Join(hosts, ","), strings.Join(ports, ","))
}

// FailoverCommand is a shell command that asks the monitor for a
// failover of the formation, as `pg_autoctl perform failover` does (by
// the monitor's SQL function pgautofailover.perform_failover; pg_autoctl
// itself refuses to run as root, psql does not): the team's own tool, as
// chaos --failover-cmd runs it. It returns once the monitor has set the
// nodes' goals, before the standby is promoted.
func (c *Cluster) FailoverCommand() string {
	return fmt.Sprintf(`%s '%s' -v ON_ERROR_STOP=1 -c "SELECT pgautofailover.perform_failover('default', 0)" && echo failover requested`,
		filepath.Join(c.bin, "bin", "psql"), c.MonitorURL())
}

// MonitorURL is the monitor's database.
func (c *Cluster) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=5", c.monitor.Port)
}

func (c *Cluster) nodeURL(n *node) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", n.Port)
}

// Dir is the directory the cluster lives in.
func (c *Cluster) Dir() string { return c.dir }

// Nodes are the data nodes.
func (c *Cluster) Nodes() []Node {
	var ns []Node
	for _, n := range c.nodes {
		ns = append(ns, n.Node)
	}
	return ns
}

// NodeState is a node as the monitor sees it.
type NodeState struct {
	Node
	Reported, Goal string
	// LSN is the last WAL position the node reported.
	LSN string
}

// States reads every data node's state from the monitor.
func (c *Cluster) States(ctx context.Context) ([]NodeState, error) {
	conn, err := connect(ctx, c.MonitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport, reportedstate::text, goalstate::text, reportedlsn::text
		FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
		var s NodeState
		err := r.Scan(&s.Name, &s.Port, &s.Reported, &s.Goal, &s.LSN)
		return s, err
	})
}

// Event is one of the monitor's state changes (pgautofailover.event).
type Event struct {
	Node           string
	Reported, Goal string
	Description    string
}

// Events are the monitor's state changes since Start returned, oldest
// first. A synchronous primary whose standby the monitor finds unhealthy
// (a machine too busy to answer its health checks in time) is assigned
// wait_primary, where it commits without the standby: a failover after
// that may lose what the standby never received.
func (c *Cluster) Events(ctx context.Context) ([]Event, error) {
	conn, err := connect(ctx, c.MonitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text, description
		FROM pgautofailover.event WHERE eventid > $1 ORDER BY eventid`, c.startEvent)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.Node, &e.Reported, &e.Goal, &e.Description)
		return e, err
	})
}

// Primary is the node the monitor has as primary: reported and assigned
// primary (or wait_primary, a primary whose standby is gone).
func (c *Cluster) Primary(ctx context.Context) (Node, error) {
	states, err := c.States(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, s := range states {
		if s.Reported == s.Goal && (s.Reported == "primary" || s.Reported == "wait_primary" || s.Reported == "single") {
			return s.Node, nil
		}
	}
	return Node{}, fmt.Errorf("the monitor has no primary: %s", describeStates(states))
}

func describeStates(states []NodeState) string {
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %s→%s", s.Name, s.Reported, s.Goal))
	}
	return strings.Join(parts, ", ")
}

// waitStates waits until every named node has reported the state the
// monitor assigned it, and that state is want's.
func (c *Cluster) waitStates(ctx context.Context, want map[string]string) error {
	var last []NodeState
	var parts []string
	for name, st := range want {
		parts = append(parts, name+" "+st)
	}
	err := c.waitFor(ctx, "the monitor to report "+strings.Join(parts, " and "), func(ctx context.Context) (bool, error) {
		states, err := c.States(ctx)
		if err != nil {
			return false, nil
		}
		last = states
		n := 0
		for _, s := range states {
			if w, ok := want[s.Name]; ok && s.Reported == w && s.Goal == w {
				n++
			}
		}
		return n == len(want), nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last seen: %s)", err, describeStates(last))
	}
	return err
}

// KillLeader kills every process of the primary's node with SIGKILL (see
// the package comment) and returns it, once they are all gone.
func (c *Cluster) KillLeader(ctx context.Context) (Node, error) {
	p, err := c.Primary(ctx)
	if err != nil {
		return Node{}, err
	}
	n := c.node(p.Name)
	if n == nil {
		return Node{}, fmt.Errorf("the monitor's primary %s is not one of this cluster's nodes", p.Name)
	}
	if err := c.killNode(ctx, n); err != nil {
		return Node{}, err
	}
	return p, nil
}

// StallReplication freezes (SIGSTOP) the primary's walsenders: the
// standby receives nothing more, as behind a congested link. An
// asynchronous primary goes on committing; a synchronous one makes every
// commit wait. resume lets them go on (a kill of the node ends them too).
func (c *Cluster) StallReplication(ctx context.Context) (resume func(), err error) {
	p, err := c.Primary(ctx)
	if err != nil {
		return nil, err
	}
	return stallSenders(c.node(p.Name))
}

// stallSenders freezes the walsenders of n's postmaster.
func stallSenders(n *node) (resume func(), err error) {
	pm := procfs.PIDFile(n.data)
	var senders []int
	for _, pr := range scanProcs() {
		// "postgres: walsender …", or "postgres: NAME: walsender …" with a
		// cluster_name (Patroni sets it to its scope).
		if title, ok := strings.CutPrefix(pr.cmdline, "postgres: "); pr.ppid == pm && pm > 0 && ok &&
			(strings.HasPrefix(title, "walsender ") || strings.Contains(title, ": walsender ")) {
			senders = append(senders, pr.pid)
		}
	}
	if len(senders) == 0 {
		return nil, fmt.Errorf("the primary %s has no walsender to stall", n.Name)
	}
	for _, pid := range senders {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	return func() {
		for _, pid := range senders {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}, nil
}

// Failover is what WaitFailover saw.
type Failover struct {
	// Promoted is the new primary.
	Promoted Node
	// Monitor is when the monitor first reported the new primary, Write
	// when it first committed a write through URL (both since the call).
	Monitor, Write time.Duration
}

// WaitFailover waits, polling the monitor, until a node other than old is
// primary and a write through URL commits on it; it fails, saying what it
// saw last, if that takes longer than timeout.
func (c *Cluster) WaitFailover(ctx context.Context, old Node, timeout time.Duration) (Failover, error) {
	began := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no failover from %s within %s", old.Name, timeout))
	defer cancel()
	var f Failover
	var last []NodeState
	err := c.waitFor(ctx, "the monitor to promote the standby", func(ctx context.Context) (bool, error) {
		states, err := c.States(ctx)
		if err != nil {
			return false, nil
		}
		last = states
		for _, s := range states {
			if s.Name != old.Name && s.Reported == s.Goal && (s.Reported == "primary" || s.Reported == "wait_primary") {
				f.Promoted, f.Monitor = s.Node, time.Since(began)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return f, fmt.Errorf("%w (last seen: %s)", err, describeStates(last))
	}
	err = c.waitFor(ctx, "a write through the cluster's URL to commit on "+f.Promoted.Name, func(ctx context.Context) (bool, error) {
		var port int
		// txid_current assigns a transaction id: a read-only server refuses.
		if err := c.queryRow(ctx, c.URL(), "SELECT inet_server_port() FROM (SELECT txid_current()) t", &port); err != nil {
			return false, nil
		}
		return port == f.Promoted.Port, nil
	})
	f.Write = time.Since(began)
	return f, err
}

func (c *Cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Memory is the memory of every process of the cluster: the sum of their
// proportional set sizes (shared memory counted once, split between its
// users) and of their resident sets (shared memory counted in each), in
// bytes, and how many processes.
func (c *Cluster) Memory() (pss, rss int64, procs int) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	for _, n := range c.all() {
		for _, pid := range nodeProcs(n) {
			p, r := memOf(pid)
			pss, rss, procs = pss+p, rss+r, procs+1
		}
	}
	return
}

func (c *Cluster) all() []*node {
	if c.monitor == nil {
		return c.nodes
	}
	return append([]*node{c.monitor}, c.nodes...)
}

// Stop kills every process of the cluster and removes its directory. It
// is idempotent; errors say what was left.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, n := range c.all() {
		if err := c.killNode(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %v", c.dir, err))
		}
	} else {
		errs = append(errs, fmt.Errorf("%s kept: bank-sim prune removes it once nothing runs in it", c.dir))
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// killNode freezes every process of n, then kills them all with SIGKILL,
// and waits until they are gone.
func (c *Cluster) killNode(ctx context.Context, n *node) error {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	pids := nodeProcs(n)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	// Frozen, the postmaster forks nothing more: its children now are all
	// there will be.
	pids = nodeProcs(n)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	err := waitGone(ctx, pids)
	if n.run != nil {
		select {
		case <-n.run.done:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("its run (pid %d) was not reaped", n.run.pid))
		}
		select {
		case <-n.run.drained:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("its run's output is still held open by %v", pipeHolders(n.run.pipe)))
		}
		n.run = nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// nodeProcs are the processes of n, with c.runMu held: its pg_autoctl run's process group
// (the supervisor, its services, the postmaster and whatever they run) and
// the postmaster's children, each of which is in a group of its own.
func nodeProcs(n *node) []int {
	// Only a proven postmaster: a stale pid file's pid may since have been
	// given to anything, and a command line proves nothing.
	proven, _ := procfs.ProvePostmaster(n.data, time.Time{})
	pm := proven.PID
	pgid := 0
	if n.run != nil {
		pgid = n.run.pid
	}
	var pids []int
	for _, p := range scanProcs() {
		if p.state == 'Z' {
			continue
		}
		if pgid > 0 && p.pgid == pgid || pm > 0 && (p.pid == pm || p.ppid == pm) {
			pids = append(pids, p.pid)
		}
	}
	if n.run != nil {
		for _, pid := range pipeHolders(n.run.pipe) {
			if !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// runNode starts `pg_autoctl run` for n.
func (c *Cluster) runNode(n *node) error {
	p, err := c.start(n.Name, "pg_autoctl", "run", "--pgdata", n.data)
	if err != nil {
		return err
	}
	c.runMu.Lock()
	n.run = p
	c.runMu.Unlock()
	return nil
}

// waitFor polls cond every 50 ms until it holds, ctx ends (the error says
// what was awaited and why it ended), or cond fails.
func (c *Cluster) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := cond(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if err := c.died(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// died reports a node's run (pg_autoctl, patroni, etcd) that has exited: a node that will not
// come.
func (c *Cluster) died() error {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	for _, n := range c.all() {
		if n.run == nil {
			continue
		}
		select {
		case <-n.run.done:
			return fmt.Errorf("the run of %s exited (%v): %s", n.Name, n.run.err, n.run.out.String())
		default:
		}
	}
	return nil
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, url)
}

func (c *Cluster) ping(ctx context.Context, url string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

func (c *Cluster) queryRow(ctx context.Context, url, q string, dst ...any) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, q).Scan(dst...)
}

// makeDir creates the cluster's directory in parent ("" for $TMPDIR),
// takes its lock, marks it as bank-sim's, and hands it
// to the unprivileged user when we are root: initdb, pg_autoctl and
// postgres refuse to run as root.
func (c *Cluster) makeDir(parent string) error {
	dir, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		return fmt.Errorf("creating the cluster's directory: %v", err)
	}
	c.dir = dir
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.RemoveAll(dir)
		return fmt.Errorf("locking %s: %v", f.Name(), err)
	}
	c.lock = f
	fmt.Fprintf(f, "a pg_auto_failover cluster of bank-sim (pid %d); bank-sim prune removes it once this lock is free\n", os.Getpid())
	if err := writeMark(dir); err != nil {
		return fmt.Errorf("marking %s as bank-sim's: %v", dir, err)
	}
	c.rec = &recorder{dir: dir}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		return err
	}
	c.env = []string{
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "share"),
		"XDG_RUNTIME_DIR=" + run,
		"PATH=" + filepath.Join(c.bin, "bin") + ":/usr/bin:/bin",
		"PGHOST=127.0.0.1",
		"PGUSER=postgres",
		// Set and empty: no Unix socket, only 127.0.0.1.
		"PG_REGRESS_SOCK_DIR=",
		"LANG=C.UTF-8",
	}
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := procfs.Nobody()
	for _, p := range []string{dir, run} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("cannot hand %s to nobody: %v", p, err)
		}
	}
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return nil
}

// proc is a long-running child: a pg_autoctl run.
type proc struct {
	pid int
	// done is closed when the process has exited and been reaped.
	done chan struct{}
	err  error
	out  *tail
	// pipe is the inode of the pipe its stdout and stderr write to, and
	// drained is closed when every writer has closed it. A process that
	// left the run's group and is not the postmaster of the pid file still
	// holds it (seen: a postmaster Patroni started across a switchover,
	// not in postmaster.pid at the kill): holding it proves the process is
	// the run's, so Stop kills it too.
	pipe    uint64
	drained chan struct{}
}

// start runs name args as the cluster's user, in a process group of its
// own, with a parent-death signal: if this process dies, pg_autoctl gets
// SIGTERM and stops its PostgreSQL.
func (c *Cluster) start(label, name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	max := c.tailMax
	if max == 0 {
		max = 8 << 10
	}
	p := &proc{done: make(chan struct{}), out: &tail{max: max}, drained: make(chan struct{})}
	var w io.Writer = p.out
	if c.opts.Log != nil {
		w = io.MultiWriter(p.out, prefixed(c.opts.Log, label))
	}
	// A pipe of our own, not exec's: exec's Wait would also wait for every
	// process holding its pipe, and one that outlived the run (a
	// daemonised postmaster) kept a node's Stop waiting out its bound.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("running %s: %v", name, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(pw.Fd()), &st); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("running %s: %v", name, err)
	}
	p.pipe = st.Ino
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		_, _ = io.Copy(w, pr)
		pr.Close()
		close(p.drained)
	}()
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the
		// child exits: keep this goroutine's thread for the child's life.
		runtime.LockOSThread()
		err := cmd.Start()
		pw.Close() // the child has its copy; ours would keep the pipe open
		if err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		// Recorded before it can be reaped: a killed run's leftovers are
		// what prune may kill, and only those.
		if err := c.rec.record(p.pid, cmd.Args); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			started <- fmt.Errorf("recording it in %s: %v", procsName, err)
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		if c.cred != nil && errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("running %s as nobody in %s: %v; a parent directory is not searchable by others: set TMPDIR to a directory under a world-searchable path", name, c.dir, err)
		}
		return nil, fmt.Errorf("running %s: %v", name, err)
	}
	return p, nil
}

// tool runs a command to completion as the cluster's user, bounded by ctx.
func (c *Cluster) tool(ctx context.Context, what, name string, args ...string) error {
	p, err := c.start(what, name, args...)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		if p.err != nil {
			// Its last words, unless something it left running keeps the
			// pipe open.
			select {
			case <-p.drained:
			case <-time.After(time.Second):
			}
			return fmt.Errorf("%s: %v: %s", what, p.err, strings.TrimSpace(p.out.String()))
		}
		return nil
	case <-ctx.Done():
		// Its whole group: pg_autoctl create runs postgres too.
		syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
