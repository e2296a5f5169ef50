package hacluster

// Patroni beside pg_auto_failover: the same machinery (a marked, locked
// directory; every process started as nobody when root, with a
// parent-death signal, and recorded for prune; a node killed whole), a
// different engine. Patroni keeps who leads in a distributed store, here
// one etcd; three Patroni nodes (a leader and two replicas, as Patroni is
// usually run) each supervise their own PostgreSQL.
//
// Patroni starts its PostgreSQL in a session of its own (setsid), so the
// postmaster is not in patroni's process group: a node's processes are
// patroni's group and the postmaster of its data directory with its
// children (nodeProcs), as for pg_autoctl. When this process dies,
// patroni and etcd get SIGTERM; patroni then stops its PostgreSQL.
//
// The timeouts are a test's: ttl 10 s, loop_wait 1 s, retry_timeout 3 s
// (Patroni's defaults are 30, 10 and 10), so that a killed leader's key
// expires and a replica takes over in seconds. fsync is off, as for the
// pg_auto_failover formation.
//
// maximum_lag_on_failover is 1 GiB, not Patroni's 1 MiB: a drill that
// stalls replication before it kills the leader wants a replica promoted
// however far behind it is (that is the loss it measures), and a replica
// more than the limit behind refuses to take over (CI: "My wal position
// exceeds maximum replication lag", no failover within 2 minutes, after a
// stall under load).
//
// use_pg_rewind is on (with wal_log_hints): when replication stalls before
// a kill, the replica that was not promoted may have received more of the
// old timeline than the one that was, and without a rewind it cannot
// follow the new leader. In synchronous_mode it is the new leader's only
// candidate standby, so commits wait for it. CI once saw the new leader's
// commits wait more than 15 s after a stalled-standby failover; this is
// the likeliest cause we know, not a proven one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
)

// ErrPatroniNotInstalled says that Patroni or etcd is missing, and how to
// get them.
var ErrPatroniNotInstalled = errors.New("Patroni or etcd not installed: apt-get install patroni etcd-server")

// PatroniScope is the Patroni cluster's name (its scope).
const PatroniScope = "bank-sim"

// PatroniOptions configure a Patroni cluster.
type PatroniOptions struct {
	// Sync turns Patroni's synchronous_mode on: the leader names one
	// replica synchronous, commits wait for it, and only it may be
	// promoted. Off, both replicas are asynchronous.
	Sync bool
	// Bin is the PostgreSQL installation (the parent of bin/); "" picks
	// the newest /usr/lib/postgresql/<major>.
	Bin string
	// StartTimeout bounds StartPatroni; 6 minutes when zero.
	StartTimeout time.Duration
	// Log, when set, receives every process's output, line by line.
	Log io.Writer
}

// Patroni is a running Patroni cluster: etcd and three nodes.
type Patroni struct {
	c        *Cluster // the machinery: c.monitor is etcd, c.nodes the Patroni nodes
	opts     PatroniOptions
	etcdPort int
	api      map[string]int // REST API port of each node
	ctl      string

	// Startup is how long StartPatroni took, from nothing to a leader
	// streaming to both replicas (and, synchronous, one of them named
	// synchronous).
	Startup time.Duration
}

// PatroniAvailable says whether Patroni can run here: nil, or an error
// wrapping ErrPatroniNotInstalled that says what is missing.
func PatroniAvailable() error {
	for _, name := range []string{"patroni", "patronictl", "etcd"} {
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("%w (%s is not on PATH)", ErrPatroniNotInstalled, name)
		}
	}
	_, err := findPG("")
	return err
}

// findPG returns the PostgreSQL installation Patroni runs.
func findPG(explicit string) (string, error) {
	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "bin", "pg_ctl"))
		return err == nil
	}
	if explicit != "" {
		if !has(explicit) {
			return "", fmt.Errorf("%w (%s has no bin/pg_ctl)", ErrPatroniNotInstalled, explicit)
		}
		return explicit, nil
	}
	for major := 18; major >= 13; major-- {
		if dir := fmt.Sprintf("/usr/lib/postgresql/%d", major); has(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (no /usr/lib/postgresql/<major>/bin/pg_ctl)", ErrPatroniNotInstalled)
}

// StartPatroni starts etcd, then three Patroni nodes at once (one
// bootstraps, the others copy it), and returns once the leader streams to
// both replicas and its synchronous_standby_names is as o.Sync asks. If
// that takes longer than StartTimeout it fails, saying what it was
// waiting for, with the end of every process's log, and leaves nothing
// behind.
func StartPatroni(ctx context.Context, o PatroniOptions) (_ *Patroni, err error) {
	began := time.Now()
	if o.StartTimeout <= 0 {
		o.StartTimeout = 6 * time.Minute
	}
	bin, err := findPG(o.Bin)
	if err != nil {
		return nil, err
	}
	if err := PatroniAvailable(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.StartTimeout,
		fmt.Errorf("the Patroni cluster did not come up within %s", o.StartTimeout))
	defer cancel()

	c := &Cluster{opts: Options{Log: o.Log}, bin: bin, tailMax: 64 << 10}
	if err := c.makeDir(""); err != nil {
		return nil, err
	}
	p := &Patroni{c: c, opts: o, api: map[string]int{}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, p.Logs(20))
			if serr := c.Stop(); serr != nil {
				err = fmt.Errorf("%w; and stopping what had started: %v", err, serr)
			}
		}
	}()
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	p.etcdPort = ports[0]
	c.monitor = &node{Node: Node{Name: "etcd", Port: ports[0]}, data: filepath.Join(c.dir, "etcd")}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node%d", i)
		c.nodes = append(c.nodes, &node{Node: Node{Name: name, Port: ports[1+i]}, data: filepath.Join(c.dir, name)})
		p.api[name] = ports[4+i]
	}

	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	run, err := c.start("etcd", "etcd", "--name", "etcd", "--data-dir", c.monitor.data,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "etcd="+peer,
		"--logger", "zap", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	c.runMu.Lock()
	c.monitor.run, c.monitor.out = run, run.out
	c.runMu.Unlock()
	if err := c.waitFor(ctx, "etcd to be healthy", func(ctx context.Context) (bool, error) {
		var h struct{ Health string }
		return getJSON(ctx, client+"/health", &h) == nil && h.Health == "true", nil
	}); err != nil {
		return nil, err
	}

	p.ctl = filepath.Join(c.dir, "patronictl.yml")
	if err := os.WriteFile(p.ctl, []byte(p.ctlConfig()), 0o644); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		cfg := filepath.Join(c.dir, n.Name+".yml")
		if err := os.WriteFile(cfg, []byte(p.nodeConfig(n)), 0o644); err != nil {
			return nil, err
		}
		run, err := c.start(n.Name, "patroni", cfg)
		if err != nil {
			return nil, err
		}
		c.runMu.Lock()
		n.run, n.out = run, run.out
		c.runMu.Unlock()
	}

	var leader *node
	var last string
	if err := c.waitFor(ctx, "a Patroni leader", func(ctx context.Context) (bool, error) {
		ms, err := p.Members(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = describeMembers(ms)
		for _, m := range ms {
			if m.Role == "leader" && m.State == "running" {
				leader = c.node(m.Name)
				return leader != nil, nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, fmt.Errorf("%w (last seen: %s)", err, last)
	}
	want := "2 replicas streaming and running, synchronous_standby_names empty (asynchronous)"
	if o.Sync {
		want = "2 replicas streaming and running, synchronous_standby_names set (synchronous_mode)"
	}
	if err := c.waitFor(ctx, leader.Name+"'s "+want, func(ctx context.Context) (bool, error) {
		var streaming int
		var names string
		// By application_name, Patroni's member name: a base backup in
		// progress streams too, as pg_basebackup.
		if err := c.queryRow(ctx, c.nodeURL(leader), `SELECT (SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND application_name LIKE 'node_'), current_setting('synchronous_standby_names')`,
			&streaming, &names); err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d streaming, synchronous_standby_names %q", streaming, names)
		if streaming != 2 || (names != "") != o.Sync {
			return false, nil
		}
		// And Patroni has seen it: every member running.
		ms, err := p.Members(ctx)
		if err != nil {
			return false, nil
		}
		last += "; " + describeMembers(ms)
		running, syncs := 0, 0
		for _, m := range ms {
			if m.State == "running" {
				running++
			}
			if m.Role == "sync_standby" {
				syncs++
			}
		}
		// In synchronous_mode, Patroni names the synchronous replica in
		// etcd a loop after setting it: until then it refuses a failover.
		return running == 3 && (syncs == 1) == o.Sync, nil
	}); err != nil {
		return nil, fmt.Errorf("%w (last seen: %s)", err, last)
	}
	if err := p.recordPostmasters(); err != nil {
		return nil, err
	}
	p.Startup = time.Since(began)
	return p, nil
}

// recordPostmasters records each node's running postmaster, for prune to
// find one that outlived its patroni (patroni starts it in a session of
// its own, so it is no descendant of what was recorded).
func (p *Patroni) recordPostmasters() error {
	for _, n := range p.c.nodes {
		if pm, err := procfs.ProvePostmaster(n.data, time.Time{}); err == nil && pm.PID > 0 {
			if err := p.c.rec.record(pm.PID, strings.Fields(procfs.Cmdline(pm.PID))); err != nil {
				return fmt.Errorf("recording %s's postmaster in %s: %v", n.Name, procsName, err)
			}
		}
	}
	return nil
}

// ctlConfig is patronictl's configuration: the scope and the store.
func (p *Patroni) ctlConfig() string {
	return fmt.Sprintf("scope: %s\netcd3:\n  hosts: 127.0.0.1:%d\n", PatroniScope, p.etcdPort)
}

// nodeConfig is n's patroni.yml. The bootstrap section is written to etcd
// by the node that initialises the cluster; the others read it there.
func (p *Patroni) nodeConfig(n *node) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: 127.0.0.1:%[4]d
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1073741824
    synchronous_mode: %[5]t
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        wal_log_hints: 'on'
        hot_standby: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 100
  initdb:
  - encoding: UTF8
  - auth: trust
  - no-sync
postgresql:
  listen: 127.0.0.1:%[6]d
  connect_address: 127.0.0.1:%[6]d
  data_dir: %[7]s
  bin_dir: %[8]s
  pgpass: %[7]s.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
  pg_hba:
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: ''
    shared_buffers: 32MB
    work_mem: 4MB
    fsync: 'off'
`, PatroniScope, n.Name, p.api[n.Name], p.etcdPort, p.opts.Sync, n.Port, n.data, filepath.Join(p.c.bin, "bin"))
}

// Member is a node as Patroni's REST API (GET /cluster) reports it.
type Member struct {
	Name     string
	Role     string // leader, sync_standby, replica
	State    string // running, stopped, starting, …
	Port     int
	Timeline int
}

// Members asks the nodes' REST APIs, in turn, until one answers, who is
// in the cluster and in which role.
func (p *Patroni) Members(ctx context.Context) ([]Member, error) {
	var errs []error
	for _, n := range p.c.nodes {
		var cl struct{ Members []Member }
		err := getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/cluster", p.api[n.Name]), &cl)
		if err == nil {
			return cl.Members, nil
		}
		errs = append(errs, fmt.Errorf("%s: %v", n.Name, err))
	}
	return nil, fmt.Errorf("no node's REST API answered: %w", errors.Join(errs...))
}

func describeMembers(ms []Member) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s %s %s (timeline %d)", m.Name, m.Role, m.State, m.Timeline))
	}
	if len(parts) == 0 {
		return "no members"
	}
	return strings.Join(parts, ", ")
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// Leader is the node Patroni has as leader, running.
func (p *Patroni) Leader(ctx context.Context) (Node, error) {
	ms, err := p.Members(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			if n := p.c.node(m.Name); n != nil {
				return n.Node, nil
			}
		}
	}
	return Node{}, fmt.Errorf("Patroni has no running leader: %s", describeMembers(ms))
}

// Candidate is the replica a failover should promote: the synchronous
// standby in synchronous_mode (Patroni refuses any other), otherwise the
// first running replica.
func (p *Patroni) Candidate(ctx context.Context) (string, error) {
	ms, err := p.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, role := range []string{"sync_standby", "replica"} {
		if role == "replica" && p.opts.Sync {
			break
		}
		for _, m := range ms {
			if m.Role == role && m.State == "running" {
				return m.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no replica to fail over to: %s", describeMembers(ms))
}

// FailoverCommand is the patronictl command that fails the cluster over
// to candidate: the team's own tool, as chaos --failover-cmd runs it.
func (p *Patroni) FailoverCommand(candidate string) string {
	return fmt.Sprintf("patronictl -c %s failover --candidate %s --force", p.ctl, candidate)
}

// CtlConfig is patronictl's configuration file for this cluster.
func (p *Patroni) CtlConfig() string { return p.ctl }

// URL is the cluster's connection string for clients: the three nodes,
// target_session_attrs=read-write.
func (p *Patroni) URL() string { return p.c.URL() }

// Dir is the directory the cluster lives in.
func (p *Patroni) Dir() string { return p.c.dir }

// Nodes are the Patroni nodes.
func (p *Patroni) Nodes() []Node { return p.c.Nodes() }

// KillLeader kills every process of the leader's node with SIGKILL, frozen
// first (patroni and its PostgreSQL, as when the machine loses power), and
// returns it once they are all gone.
func (p *Patroni) KillLeader(ctx context.Context) (Node, error) {
	l, err := p.Leader(ctx)
	if err != nil {
		return Node{}, err
	}
	if err := p.c.killNode(ctx, p.c.node(l.Name)); err != nil {
		return Node{}, err
	}
	return l, nil
}

// StallReplication freezes (SIGSTOP) the leader's walsenders: neither
// replica receives anything more. resume lets them go on.
func (p *Patroni) StallReplication(ctx context.Context) (resume func(), err error) {
	l, err := p.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return stallSenders(p.c.node(l.Name))
}

// WaitFailover waits until Patroni has a running leader other than old
// and a write through URL commits on it; it fails, saying what it saw
// last, if that takes longer than timeout. Failover.Monitor is when
// Patroni's REST API first named the new leader.
func (p *Patroni) WaitFailover(ctx context.Context, old Node, timeout time.Duration) (Failover, error) {
	began := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no failover from %s within %s", old.Name, timeout))
	defer cancel()
	var f Failover
	last := "nothing"
	err := p.c.waitFor(ctx, "Patroni to elect a new leader", func(ctx context.Context) (bool, error) {
		ms, err := p.Members(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = describeMembers(ms)
		for _, m := range ms {
			if m.Name != old.Name && m.Role == "leader" && m.State == "running" {
				if n := p.c.node(m.Name); n != nil {
					f.Promoted, f.Monitor = n.Node, time.Since(began)
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return f, fmt.Errorf("%w (last seen: %s)", err, last)
	}
	err = p.c.waitFor(ctx, "a write through the cluster's URL to commit on "+f.Promoted.Name, func(ctx context.Context) (bool, error) {
		var port int
		if err := p.c.queryRow(ctx, p.URL(), "SELECT inet_server_port() FROM (SELECT txid_current()) t", &port); err != nil {
			return false, nil
		}
		return port == f.Promoted.Port, nil
	})
	f.Write = time.Since(began)
	if err == nil {
		err = p.recordPostmasters()
	}
	return f, err
}

// Memory is the memory of every process of the cluster, etcd included
// (see Cluster.Memory).
func (p *Patroni) Memory() (pss, rss int64, procs int) { return p.c.Memory() }

// Logs is the end of every process's output, at most lines lines each:
// the evidence when a run fails.
func (p *Patroni) Logs(lines int) string {
	p.c.runMu.Lock()
	defer p.c.runMu.Unlock()
	var b strings.Builder
	for _, n := range p.c.all() {
		if n.out == nil {
			fmt.Fprintf(&b, "== %s: never started\n", n.Name)
			continue
		}
		out := strings.Split(strings.TrimRight(n.out.String(), "\n"), "\n")
		if len(out) > lines {
			out = out[len(out)-lines:]
		}
		fmt.Fprintf(&b, "== %s (last %d lines)\n%s\n", n.Name, len(out), strings.Join(out, "\n"))
	}
	return b.String()
}

// Stop kills every process of the cluster and removes its directory (see
// Cluster.Stop).
func (p *Patroni) Stop() error { return p.c.Stop() }
