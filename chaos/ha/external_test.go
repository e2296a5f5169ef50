package ha_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
)

// A team's cluster, as bank-sim's own pair stands in for it: reached only
// through a multi-host URL with the standby listed first, and failed over
// by the team's own command (here a small script that asks a failover
// endpoint, as patronictl asks Patroni's REST API) at the seeded intent.
// The run sees the primary change from the old host to the promoted one,
// on the next timeline, keeps the workload going through it, heals after,
// and keeps the command's output.
func TestFailoverCmdOnATeamsCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute,
		errors.New("a chaos run through the team's failover command did not finish within 3 minutes"))
	defer cancel()
	began := time.Now()
	pair, err := postgres.StartPair(ctx, postgres.Options{}, postgres.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	primary, standby := pair.Ports()
	// Later keywords win: the standby first.
	url := pair.URL("postgres") + fmt.Sprintf(" host=127.0.0.1,127.0.0.1 port=%d,%d", standby, primary)
	srv, err := postgres.Start(ctx, postgres.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	// The team's failover endpoint: the primary dies, the standby is promoted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := pair.KillPrimary(r.Context()); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if err := pair.Promote(r.Context()); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "promoted 127.0.0.1:%d\n", standby)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	cmd := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf "POST /failover HTTP/1.0\r\n\r\n" >&3 && cat <&3'`, ln.Addr().(*net.TCPAddr).Port)

	cfg := chaos.Config{Seed: pairSeed, Clients: 4, Intents: 60, Faults: chaos.Rates{}}.WithDefaults()
	h, err := ha.RunExternal(ctx, banks.OnServer(srv, banks.Options{}), cfg, chaos.Options{},
		ha.ExternalOptions{WatchURL: srv.AdminURL(), FailoverCmd: cmd, CmdTimeout: time.Minute, WaitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res := chaos.Check(h)
	fc := h.FailoverCommand
	if fc == nil || fc.ExitCode != 0 || !strings.Contains(fc.Output, "promoted") || fc.AfterIntent != cfg.CrashIntent() {
		t.Fatalf("the failover command: %+v; want it run as intent %d started, exit 0, its output kept", fc, cfg.CrashIntent())
	}
	if len(res.PrimaryChanges) != 1 {
		t.Fatalf("primary changes: %+v, want one", res.PrimaryChanges)
	}
	pc := res.PrimaryChanges[0]
	t.Logf("%s; command: %s; pair + run %s", pc.Line(), fc.Line(), time.Since(began).Round(time.Millisecond))
	from, to := fmt.Sprintf("127.0.0.1:%d", primary), fmt.Sprintf("127.0.0.1:%d", standby)
	if pc.From != from || pc.To != to || pc.Cause != chaos.CauseCommand {
		t.Errorf("the change: %s → %s (%s), want %s → %s (%s)", pc.From, pc.To, pc.Cause, from, to, chaos.CauseCommand)
	}
	if pc.FromTimeline < 1 || pc.ToTimeline != pc.FromTimeline+1 {
		t.Errorf("timelines %d → %d, want the next one after a promotion", pc.FromTimeline, pc.ToTimeline)
	}
	if !(fc.StartNs <= pc.LostNs && pc.LostNs <= pc.SeenNs && pc.SeenNs <= fc.EndNs+int64(time.Second)) {
		t.Errorf("the change's times (lost %d, seen %d) are not within the command's (%d–%d)", pc.LostNs, pc.SeenNs, fc.StartNs, fc.EndNs)
	}
	if pc.LastAckNs < 0 || pc.FirstAckNs <= pc.LastAckNs {
		t.Errorf("unavailability window: last acknowledged %d, first after %d; want both, in order (the workload went on)", pc.LastAckNs, pc.FirstAckNs)
	}
	if res.Stats.Intents != cfg.Intents || res.ByKind[chaos.KindUnresolved] != 0 {
		t.Errorf("%d intents, %d unresolved: healing after the failover did not settle them all", res.Stats.Intents, res.ByKind[chaos.KindUnresolved])
	}
}
