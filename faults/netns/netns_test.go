package netns_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

const childEnv = "BANK_SIM_NETNS_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(child(dir))
	}
	os.Exit(pgtest.Run(m))
}

// child makes a network as a run would, says so, and waits to be killed.
func child(dir string) int {
	n, err := netns.New(dir)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	a, err := n.Node("app1")
	if err == nil {
		var b *netns.Node
		if b, err = n.Node("app2"); err == nil {
			if _, err = n.Link(n.Root(), a); err == nil {
				_, err = n.Link(a, b)
			}
		}
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready", n.ID())
	time.Sleep(time.Minute) // killed long before
	return 2
}

// needNet skips t unless this machine can make namespaces.
func needNet(t *testing.T) {
	t.Helper()
	pgtest.Exhaustive(t)
	if err := netns.Available(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
}

func namespaces(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

func links(t *testing.T) map[string]bool {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, i := range ifs {
		m[i.Name] = true
	}
	return m
}

// A run killed with SIGKILL leaves its namespaces and links; Prune removes
// exactly those, and leaves a namespace and a link the user made with
// bank-sim's very names (the same prefix, the same run id), and a live
// run's network.
func TestPruneRemovesWhatAKilledRunLeftAndNothingElse(t *testing.T) {
	needNet(t)
	dir := t.TempDir()

	// A live run: Prune must not touch it.
	live, err := netns.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	liveNode, err := live.Node("live")
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
		io.Copy(io.Discard, stdout)
	}()
	var id string
	select {
	case line := <-ready:
		if !strings.HasPrefix(line, "ready ") {
			t.Fatalf("the child did not make its network: %q", line)
		}
		id = strings.TrimPrefix(line, "ready ")
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not say ready within 60 s")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	left := []string{"banksim-" + id + "-app1", "banksim-" + id + "-app2"}
	rootLink := "bs" + id + "-0a"
	// However Prune goes, nothing of the child's stays behind the test.
	t.Cleanup(func() {
		for _, ns := range left {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	ns := namespaces(t)
	for _, name := range left {
		if !ns[name] {
			t.Fatalf("the killed run's namespace %s is not there: nothing to prune; have %v", name, ns)
		}
	}
	if !links(t)[rootLink] {
		t.Fatalf("the killed run's link %s is not there", rootLink)
	}

	// The user's, named as bank-sim names its own.
	userNS, userLink := "banksim-"+id+"-user", "bs"+id+"-9a"
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", userNS).Run()
		exec.Command("ip", "link", "del", userLink).Run()
	})
	for _, c := range [][]string{{"netns", "add", userNS}, {"link", "add", userLink, "type", "veth", "peer", "name", "usr" + id}} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}

	dry, err := netns.Prune(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if ns := namespaces(t); !ns[left[0]] || !ns[left[1]] {
		t.Fatalf("a dry run removed the namespaces: %v", ns)
	}
	began := time.Now()
	found, err := netns.Prune(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prune took %s; found %+v (dry run: %d)", time.Since(began), found, len(dry))
	ns = namespaces(t)
	for _, name := range left {
		if ns[name] {
			t.Errorf("prune left the killed run's namespace %s", name)
		}
	}
	if links(t)[rootLink] {
		t.Errorf("prune left the killed run's link %s", rootLink)
	}
	if !ns[userNS] || !links(t)[userLink] {
		t.Errorf("prune removed the user's namespace %s or link %s", userNS, userLink)
	}
	if !ns[liveNode.Name()] {
		t.Errorf("prune removed the live run's namespace %s", liveNode.Name())
	}
	if _, err := os.Stat(filepath.Join(dir, id+".json")); !os.IsNotExist(err) {
		t.Errorf("the killed run's state file is still there: %v", err)
	}
	var foreign, removed int
	for _, l := range found {
		switch {
		case l.State == netns.Foreign && l.Name == userNS:
			foreign++
		case l.State == netns.Removed && l.Err == nil && l.Run == id && l.Kind == "namespace":
			removed++
		case l.Err != nil:
			t.Errorf("%s %s: %v", l.Kind, l.Name, l.Err)
		}
	}
	if foreign != 1 || removed != 2 {
		t.Errorf("want the user's namespace reported as foreign and the child's 2 namespaces removed; got %+v", found)
	}

	// Close removes the live run's network too, and its state file.
	closing := time.Now()
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close of a run with 1 namespace took %s", time.Since(closing))
	if namespaces(t)[liveNode.Name()] {
		t.Errorf("Close left %s", liveNode.Name())
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 0 {
		t.Errorf("state files left after Close and Prune: %v", files)
	}
}

// Prune's bookkeeping without namespaces (any user): a dead run's file
// whose namespace is gone is removed; a file whose run holds its lock, and
// an empty one just made, stay.
func TestPruneReadsStateFilesAndSparesLiveRuns(t *testing.T) {
	dir := t.TempDir()
	write := func(id string, st map[string]any) string {
		b, _ := json.Marshal(st)
		p := filepath.Join(dir, id+".json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := write("aaaaaa", map[string]any{"id": "aaaaaa", "subnet": "169.254.7.0/24",
		"namespaces": []map[string]any{{"name": "banksim-aaaaaa-app1", "inode": 4026532999}}})
	livePath := write("bbbbbb", map[string]any{"id": "bbbbbb", "subnet": "169.254.8.0/24"})
	f, err := os.OpenFile(livePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "cccccc.json")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	found, err := netns.Prune(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead run's state file was kept: %v", err)
	}
	for _, p := range []string{livePath, empty} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(p), err)
		}
	}
	var ours []netns.Leftover
	for _, l := range found {
		if l.Run != "" { // not the look-alikes another test may have on this host
			ours = append(ours, l)
		}
	}
	if len(ours) != 1 || ours[0].State != netns.Gone || ours[0].Name != "banksim-aaaaaa-app1" {
		t.Errorf("want the dead run's namespace reported gone; got %+v", ours)
	}
}
