// Package netns is a real network for one run, Jepsen-style: network
// namespaces the run itself creates, veth pairs between them with private
// link-local addresses, and on each pair a cut for a partition, packet
// loss (nftables, in the run's namespace) and delay (tc netem, where the
// kernel has it). The app servers of a chaos run listen and dial from
// inside their namespaces (Node.Listen, Node.DialContext), so a partition
// between them and PostgreSQL is the kernel's, not a proxy's.
//
// Everything needs root and iproute2 (ip, tc), and loss nftables' nft:
// Available says why not (Loss says so for nft).
//
// What is bank-sim's to remove: a run records every namespace and root-side
// link in a state file under the cache directory (<cache>/netns/<id>.json)
// before it creates it, with the namespace's inode or the link's index
// once it exists, and holds an exclusive flock on that file while it runs.
// Close removes everything and the file. A killed run's lock is released by
// the kernel; Prune (bank-sim prune) then removes what such a file lists,
// and only when the name, the prefix and the inode or index still match:
// a namespace or link the user made, whatever its name, is never touched.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The names a run gives: namespaces nsPrefix+<id>-<node>, interfaces
// ifPrefix+<id>-<link number><a|b> (15 bytes at most, the kernel's limit).
const (
	nsPrefix = "banksim-"
	ifPrefix = "bs"
)

// netnsDir is where ip netns keeps its named namespaces (bind mounts).
const netnsDir = "/run/netns"

// cmdTimeout bounds every ip and tc command: they take milliseconds.
const cmdTimeout = 30 * time.Second

// Available reports why this machine cannot make a run's network: not
// root, no ip or tc, or no network namespaces. nil when it can.
func Available() error {
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s (iproute2) is not installed: apt-get install iproute2", tool)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root (run as root, or skip the partition)")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("this kernel has no network namespaces: %v", err)
	}
	return nil
}

// Net is one run's network.
type Net struct {
	id     string
	subnet netip.Prefix // 169.254.X.0/24
	file   *os.File     // the state file, flocked while the run lives

	mu     sync.Mutex
	st     state
	nodes  []*Node
	links  []*Link
	closed bool
}

// state is what a run's state file records.
type state struct {
	ID         string        `json:"id"`
	PID        int           `json:"pid"`
	Started    time.Time     `json:"started"`
	Subnet     string        `json:"subnet"`
	Namespaces []nsRecord    `json:"namespaces"`
	Links      []ifaceRecord `json:"links"`
}

// nsRecord is a namespace a run made; Inode is 0 until it exists.
type nsRecord struct {
	Name  string `json:"name"`
	Inode uint64 `json:"inode,omitempty"`
}

// ifaceRecord is the root-side end of a veth pair; Index is 0 until it
// exists. (An end inside a namespace goes with the namespace.)
type ifaceRecord struct {
	Name  string `json:"name"`
	Index int    `json:"index,omitempty"`
}

// StateDir is where the runs' state files live under the cache directory.
func StateDir(cacheDir string) string { return filepath.Join(cacheDir, "netns") }

// New makes an empty network for one run, recorded under stateDir
// (StateDir of the cache directory). Close removes it.
func New(stateDir string) (*Net, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("netns: cannot create %s: %v", stateDir, err)
	}
	n := &Net{}
	for range 8 {
		n.id = randHex(3)
		f, err := os.OpenFile(filepath.Join(stateDir, n.id+".json"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netns: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("netns: locking %s: %v", f.Name(), err)
		}
		n.file = f
		break
	}
	if n.file == nil {
		return nil, errors.New("netns: no free run id in 8 tries")
	}
	sub, err := freeSubnet(stateDir)
	if err != nil {
		n.dropState()
		return nil, err
	}
	n.subnet = sub
	n.st = state{ID: n.id, PID: os.Getpid(), Started: time.Now().UTC(), Subnet: sub.String()}
	if err := n.save(); err != nil {
		n.dropState()
		return nil, err
	}
	return n, nil
}

// ID is the run's id, in every name it gives.
func (n *Net) ID() string { return n.id }

// Subnet is the run's addresses: every link's are in it.
func (n *Net) Subnet() netip.Prefix { return n.subnet }

// save writes the state in place: a rename would leave the lock on the
// old file.
func (n *Net) save() error {
	b, _ := json.MarshalIndent(n.st, "", "  ")
	if err := n.file.Truncate(0); err != nil {
		return fmt.Errorf("netns: writing %s: %v", n.file.Name(), err)
	}
	if _, err := n.file.WriteAt(b, 0); err != nil {
		return fmt.Errorf("netns: writing %s: %v", n.file.Name(), err)
	}
	return n.file.Sync()
}

func (n *Net) dropState() {
	os.Remove(n.file.Name())
	n.file.Close()
}

// freeSubnet picks a 169.254.X.0/24 that no address or route on this host
// and no other run's state file uses. Link-local addresses are never
// routed beyond a link, so nothing outside the run's namespaces can be
// reached through them; 169.254.169.0/24 (cloud metadata) is never chosen.
func freeSubnet(stateDir string) (netip.Prefix, error) {
	used := map[byte]bool{0: true, 169: true, 255: true}
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		out, err := run(context.Background(), "ip", args...)
		if err != nil {
			return netip.Prefix{}, err
		}
		for _, f := range strings.Fields(out) {
			f, _, _ = strings.Cut(f, "/")
			if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
				b := a.As4()
				if b[0] == 169 && b[1] == 254 {
					used[b[2]] = true
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	for _, f := range files {
		if st, err := readState(f); err == nil {
			if p, err := netip.ParsePrefix(st.Subnet); err == nil {
				used[p.Addr().As4()[2]] = true
			}
		}
	}
	var r [1]byte
	for range 64 {
		rand.Read(r[:])
		if !used[r[0]] {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, r[0], 0}), 24), nil
		}
	}
	return netip.Prefix{}, errors.New("netns: no free 169.254.X.0/24 on this host")
}

func readState(path string) (state, error) {
	var st state
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if len(b) == 0 {
		return st, errEmpty
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

var errEmpty = errors.New("empty state file")

// Node is a network namespace of the run's, or the root namespace.
type Node struct {
	net  *Net
	name string // "" for the root namespace
	fd   int    // an open /run/netns/<name>; -1 for the root namespace
}

// Root is the namespace this process runs in (PostgreSQL's, the clients').
func (n *Net) Root() *Node { return &Node{net: n, fd: -1} }

// Node makes a namespace for name (a short word: "app1"), named
// banksim-<id>-<name>, with its loopback up.
func (n *Net) Node(name string) (*Node, error) {
	if !validWord(name) {
		return nil, fmt.Errorf("netns: node name %q: use 1 to 12 letters, digits or dashes", name)
	}
	full := nsPrefix + n.id + "-" + name
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("netns: the network is closed")
	}
	n.st.Namespaces = append(n.st.Namespaces, nsRecord{Name: full})
	rec := &n.st.Namespaces[len(n.st.Namespaces)-1]
	if err := n.save(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if _, err := run(ctx, "ip", "netns", "add", full); err != nil {
		// Nothing made: a namespace of that name is someone else's.
		n.st.Namespaces = n.st.Namespaces[:len(n.st.Namespaces)-1]
		return nil, errors.Join(err, n.save())
	}
	ino, err := nsInode(full)
	if err != nil {
		return nil, err
	}
	rec.Inode = ino
	if err := n.save(); err != nil {
		return nil, err
	}
	fd, err := unix.Open(filepath.Join(netnsDir, full), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: opening %s: %v", full, err)
	}
	nd := &Node{net: n, name: full, fd: fd}
	n.nodes = append(n.nodes, nd)
	if _, err := run(ctx, "ip", "-n", full, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	return nd, nil
}

// Name is the namespace's name ("" for the root namespace).
func (nd *Node) Name() string { return nd.name }

// nsIdentity is the identity of the namespace now named name: the inode of
// /run/netns/<name>. A variable so that a test can replace a namespace by
// a same-named one without root.
var nsIdentity = nsInode

// nsDelete deletes the namespace named name (ip netns del goes by name).
var nsDelete = func(ctx context.Context, name string) error {
	_, err := run(ctx, "ip", "netns", "del", name)
	return err
}

func nsInode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(netnsDir, name), &st); err != nil {
		return 0, fmt.Errorf("netns: %s: %v", name, err)
	}
	return st.Ino, nil
}

// in runs f on an OS thread inside the node's namespace. Sockets f makes
// live there for good, whichever thread uses them later. The thread is
// never unlocked, so it ends with its goroutine rather than going back to
// Go's pool still inside the namespace.
func (nd *Node) in(f func() error) error {
	if nd.fd < 0 {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(nd.fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: entering %s: %v", nd.name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Listen listens on addr (an IP literal and port) inside the namespace.
func (nd *Node) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := nd.in(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket listens for datagrams on addr inside the namespace.
func (nd *Node) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := nd.in(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// DialContext dials addr (an IP literal and port: no name lookups, which
// would run on other threads) from inside the namespace. It has the shape
// of pgconn's DialFunc.
func (nd *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := nd.in(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Link is a veth pair between two nodes, with a /30 of the run's subnet:
// A is its first node's end, B its second's.
type Link struct {
	net     *Net
	a, b    *Node
	ifA     string
	ifB     string
	addrA   netip.Addr
	addrB   netip.Addr
	mu      sync.Mutex
	delay   time.Duration
	lossPct float64
	cut     bool // its A end is down
}

// Link joins a and b (either may be Root) with a veth pair, addressed and up.
func (n *Net) Link(a, b *Node) (*Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("netns: the network is closed")
	}
	k := len(n.links)
	if k >= 63 {
		return nil, errors.New("netns: at most 63 links in a run")
	}
	base := n.subnet.Addr().As4()
	l := &Link{net: n, a: a, b: b,
		ifA:   fmt.Sprintf("%s%s-%da", ifPrefix, n.id, k),
		ifB:   fmt.Sprintf("%s%s-%db", ifPrefix, n.id, k),
		addrA: netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(4*k + 1)}),
		addrB: netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(4*k + 2)}),
	}
	for _, end := range []struct {
		nd  *Node
		ifc string
	}{{a, l.ifA}, {b, l.ifB}} {
		if end.nd.fd < 0 {
			n.st.Links = append(n.st.Links, ifaceRecord{Name: end.ifc})
		}
	}
	if err := n.save(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	args := append(nsArgs(a), "link", "add", l.ifA, "type", "veth", "peer", "name", l.ifB)
	if b.fd >= 0 {
		args = append(args, "netns", b.name)
	}
	if _, err := run(ctx, "ip", args...); err != nil {
		return nil, err
	}
	for i := range n.st.Links {
		r := &n.st.Links[i]
		if r.Name == l.ifA || r.Name == l.ifB {
			ifc, err := net.InterfaceByName(r.Name)
			if err != nil {
				return nil, fmt.Errorf("netns: %s: %v", r.Name, err)
			}
			r.Index = ifc.Index
		}
	}
	if err := n.save(); err != nil {
		return nil, err
	}
	n.links = append(n.links, l)
	for _, end := range []struct {
		nd   *Node
		ifc  string
		addr netip.Addr
	}{{a, l.ifA, l.addrA}, {b, l.ifB, l.addrB}} {
		if _, err := run(ctx, "ip", append(nsArgs(end.nd), "addr", "add", netip.PrefixFrom(end.addr, 30).String(), "dev", end.ifc)...); err != nil {
			return nil, err
		}
		if _, err := run(ctx, "ip", append(nsArgs(end.nd), "link", "set", end.ifc, "up")...); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// AddrA and AddrB are the link's addresses at its ends.
func (l *Link) AddrA() netip.Addr { return l.addrA }
func (l *Link) AddrB() netip.Addr { return l.addrB }

// Ends are the link's interface names, A's then B's.
func (l *Link) Ends() (string, string) { return l.ifA, l.ifB }

func nsArgs(nd *Node) []string {
	if nd.fd < 0 {
		return nil
	}
	return []string{"-n", nd.name}
}

// Delay holds every packet d in each direction (tc netem on both ends):
// the round trip grows by 2d. It needs sch_netem (ErrNoNetem).
func (l *Link) Delay(d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
	return l.applyDelay()
}

// Loss drops pct per cent of the packets in each direction, each packet
// on its own draw: nftables rules (numgen random) on the ingress and
// egress hooks of the link's B end, in its namespace (or of its A end
// when B is the root namespace), so the host's own firewall is never
// touched and the rules go with the namespace. It needs nft (ErrNoNft); unlike netem it works on kernels
// without sch_netem, and it holds across a Cut and Heal.
func (l *Link) Loss(pct float64) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("netns: loss %g%% is not from 0 to 100", pct)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.applyLoss(pct); err != nil {
		return err
	}
	l.lossPct = pct
	return nil
}

// Cut partitions the link by taking its A end down (ip link set down):
// at B, whose carrier goes, every packet toward A is dropped in silence,
// so B's sockets see neither an error nor a reset, only silence, and time
// out (Jepsen drops packets the same way); at A, the route to B is gone.
// An app server at B cut off from PostgreSQL at A: a COMMIT it had sent
// that PostgreSQL received is committed, and its answer is lost. Both
// ends keep their addresses, so PostgreSQL's listening socket on A's
// survives the cut.
func (l *Link) Cut() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	return l.setA("down")
}

// Heal ends a Cut: A's end is up again, with its delay and loss as they
// were.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
	return l.setA("up")
}

func (l *Link) setA(state string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	_, err := run(ctx, "ip", append(nsArgs(l.a), "link", "set", l.ifA, state)...)
	return err
}

// ErrNoNetem is Delay's error on a kernel without sch_netem (some VMs',
// Firecracker's): Loss, Cut and Heal still work.
var ErrNoNetem = errors.New("this kernel has no netem queueing discipline (sch_netem): delay is unavailable here (loss, cut and heal still work)")

// ErrNoNft is Loss's error without nftables' nft command.
var ErrNoNft = errors.New("packet loss needs nftables' nft command: apt-get install nftables")

// applyDelay sets both ends' netem delay, or removes it.
func (l *Link) applyDelay() error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	for _, end := range []struct {
		nd  *Node
		ifc string
	}{{l.a, l.ifA}, {l.b, l.ifB}} {
		args := append(nsArgs(end.nd), "qdisc", "replace", "dev", end.ifc, "root", "netem",
			"delay", fmt.Sprintf("%dus", l.delay.Microseconds()), "limit", "100000")
		if l.delay == 0 {
			args = append(nsArgs(end.nd), "qdisc", "del", "dev", end.ifc, "root")
		}
		if _, err := run(ctx, "tc", args...); err != nil {
			switch {
			case l.delay == 0:
				// No netem there to remove.
			case strings.Contains(err.Error(), "qdisc kind is unknown"):
				return fmt.Errorf("netns: %w", ErrNoNetem)
			default:
				return err
			}
		}
	}
	return nil
}

// lossTable is the nftables table a link's loss lives in, in the
// namespace of the end it is applied at.
const lossTable = "banksim"

// applyLoss replaces the loss rules of the link's namespace end with
// pct's (none for 0). Each link has its own chains, so links that share
// a namespace keep each other's.
func (l *Link) applyLoss(pct float64) error {
	nd, ifc := l.b, l.ifB
	if nd.fd < 0 {
		nd, ifc = l.a, l.ifA
	}
	if nd.fd < 0 {
		return errors.New("netns: loss needs one end of the link in a namespace of the run's")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("netns: %w", ErrNoNft)
	}
	in, out := "in_"+strings.ReplaceAll(ifc, "-", "_"), "out_"+strings.ReplaceAll(ifc, "-", "_")
	// Declaring the table and chains first makes the flushes and the
	// deletes valid whether or not they exist yet; nft applies the whole
	// script atomically.
	var b strings.Builder
	// The netdev family's ingress and egress hooks of the interface: a
	// packet is dropped as it arrives or as it leaves, like one a wire
	// loses, and not in the socket layer (where an output hook's drop is
	// an EPERM for the sender, which no network does).
	fmt.Fprintf(&b, "add table netdev %s\n", lossTable)
	fmt.Fprintf(&b, "add chain netdev %s %s { type filter hook ingress device %q priority 0; policy accept; }\n", lossTable, in, ifc)
	fmt.Fprintf(&b, "add chain netdev %s %s { type filter hook egress device %q priority 0; policy accept; }\n", lossTable, out, ifc)
	if pct == 0 {
		fmt.Fprintf(&b, "delete chain netdev %s %s\ndelete chain netdev %s %s\n", lossTable, in, lossTable, out)
	} else {
		// numgen draws 0 … 9999 per packet: per ten thousand.
		n := int(pct*100 + 0.5)
		fmt.Fprintf(&b, "flush chain netdev %s %s\nflush chain netdev %s %s\n", lossTable, in, lossTable, out)
		fmt.Fprintf(&b, "add rule netdev %s %s numgen random mod 10000 < %d drop\n", lossTable, in, n)
		fmt.Fprintf(&b, "add rule netdev %s %s numgen random mod 10000 < %d drop\n", lossTable, out, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := nd.inProcess(cmd)
	if err != nil {
		return fmt.Errorf("netns: nft in %s: %v: %s", nd.name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// inProcess runs cmd inside the node's namespace (ip netns exec).
func (nd *Node) inProcess(cmd *exec.Cmd) error {
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		return err
	}
	cmd.Args = append([]string{"ip", "netns", "exec", nd.name}, append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = ipPath
	return cmd.Run()
}

// Close removes every namespace and link of the run, then its state file.
// It is safe to call more than once.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	for _, nd := range n.nodes {
		unix.Close(nd.fd)
	}
	var errs []error
	for _, r := range n.st.Namespaces {
		if err := removeNamespace(r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range n.st.Links {
		if err := removeLink(r); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		n.dropState()
	} else {
		// Kept for prune, which tries again.
		n.file.Close()
	}
	return errors.Join(errs...)
}

// removeNamespace deletes r if it is still the namespace the run made
// (same name, same inode, read just before the delete): gone already is
// not an error. One whose inode was never recorded proves nothing.
func removeNamespace(r nsRecord) error {
	ino, err := nsIdentity(r.Name)
	if err != nil {
		return nil // gone
	}
	if r.Inode == 0 || ino != r.Inode || !strings.HasPrefix(r.Name, nsPrefix) {
		return fmt.Errorf("%s: %w", r.Name, errNotOurs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	return nsDelete(ctx, r.Name)
}

// removeLink deletes r if it is still the root-side interface the run made
// (same name, same index). Usually it went with its namespace.
func removeLink(r ifaceRecord) error {
	ifc, err := net.InterfaceByName(r.Name)
	if err != nil {
		return nil // gone
	}
	if r.Index != 0 && ifc.Index != r.Index || !strings.HasPrefix(r.Name, ifPrefix) {
		return fmt.Errorf("%s: %w", r.Name, errNotOurs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	_, err = run(ctx, "ip", "link", "del", r.Name)
	if err != nil {
		// A veth goes with its peer's namespace, and the kernel removes it
		// a moment after the namespace: ip then says "Cannot find device"
		// or, when the link went between its lookup and its deletion,
		// "No such device" (CI's exhaustive run). Gone is not an error.
		if _, lerr := net.InterfaceByName(r.Name); lerr != nil {
			return nil
		}
	}
	return err
}

// errNotOurs refuses to remove what the run's record does not prove is its.
var errNotOurs = errors.New("its inode or index is not the one the run recorded (or none was): someone else's now, left alone")

// run runs an ip or tc command and returns its output; an error says the
// command and what it printed.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("netns: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func validWord(s string) bool {
	if s == "" || len(s) > 12 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func interfaceIndex(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}
