package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// killedMidCreate stands in for a run on a server it does not own,
// killed during a CREATE DATABASE: it reaches the server through a proxy
// that passes on its CREATE DATABASE of a database labelled doomed and
// then cuts the run off, as a SIGKILL does; the server finishes the CREATE
// for a client that has gone, and the marker is never written. The run
// also leaves, under its owner key, a database without the marker that it
// never meant to create: a look-alike, which no one may drop. It returns
// the two names; the run's owner lock is released, as a kill releases it.
func killedMidCreate(t *testing.T, url string, admin *pgx.Conn) (killed, lookalike string) {
	t.Helper()
	ctx := context.Background()
	s, err := Start(ctx, Options{URL: cuttingProxy(t, url, "doomed")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateDatabase(ctx, testTemplate, "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDatabase(ctx, testTemplate, "doomed"); err == nil {
		t.Fatal("the CREATE DATABASE of the doomed database succeeded through a proxy that cut it off")
	}
	waitFor(t, admin, "the server to finish the CREATE DATABASE of the doomed database",
		"SELECT count(*) FROM pg_database WHERE starts_with(datname, '"+s.owner.name("doomed_")+"')", 1)
	for _, n := range databases(t, admin) {
		if strings.HasPrefix(n, s.owner.name("doomed_")) {
			killed = n
		}
	}
	if c := commentOf(t, admin, killed); c != "" {
		t.Fatalf("the database of the cut-off CREATE has a comment: %q", c)
	}
	lookalike = s.owner.name("lookalike_" + randHex(4))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+quote(lookalike)); err != nil {
		t.Fatal(err)
	}
	releaseOwner(t, s, admin)
	return killed, lookalike
}

// prunePendingOrphan prunes url dry, then for real, and checks both times
// that the killed run's database (what it is, for the message) is a pending
// orphan, dropped unless dry, and the look-alike an unmarked database, kept;
// then that only the killed run's database is gone.
func prunePendingOrphan(t *testing.T, url string, admin *pgx.Conn, killed, lookalike, what string, unmarked []string) {
	t.Helper()
	for _, dry := range []bool{true, false} {
		_, found, err := PruneServer(context.Background(), url, dry)
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]Leftover{}
		for _, l := range found {
			states[l.Name] = l
		}
		if l := states[killed]; l.State != Orphan || !l.Pending || l.Dropped == dry || l.Err != nil {
			t.Errorf("dryRun=%v: the killed run's %s is %+v; want a pending orphan, dropped unless dry", dry, what, l)
		}
		if l := states[lookalike]; l.State != Unmarked || l.Pending || l.Dropped {
			t.Errorf("dryRun=%v: the look-alike is %+v; want unmarked, kept", dry, l)
		}
	}
	have := databases(t, admin)
	requireAbsent(t, have, []string{killed}, "after prune")
	requirePresent(t, have, append([]string{lookalike}, unmarked...), "after prune")
}

// releaseOwner ends s's owner session, as a killed run's ends, and waits
// until the server has let its advisory lock go: closing the connection
// returns before the backend exits, and a prune that still sees the lock
// held takes the run for alive (seen under load: the killed run's scratch
// database listed as an ordinary unmarked one, not a pending orphan).
func releaseOwner(t *testing.T, s *Server, admin *pgx.Conn) {
	t.Helper()
	key, _ := ownerOf(s.owner.name(""))
	s.owner.release()
	waitFor(t, admin, "the server to release the killed run's owner lock",
		fmt.Sprintf("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND classid::bigint = %d AND objid::bigint = %d", key>>32, key&0xffffffff), 0)
}

// cuttingProxy forwards connections to the server at url and returns a URL
// that goes through it, dropping cancel requests; once a client sends a
// CREATE DATABASE naming trigger, the proxy passes it on and closes the
// client's side only: the server goes on with the CREATE, the client sees
// its connection lost.
func cuttingProxy(t *testing.T, url, trigger string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var servers []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, s := range servers {
			s.Close()
		}
	})
	handle := func(c net.Conn) {
		defer c.Close()
		// A killed client sends no cancel request: pgx's, sent when it
		// sees its connection lost, would stop the CREATE.
		var first [8]byte
		if _, err := io.ReadFull(c, first[:]); err != nil || binary.BigEndian.Uint32(first[:4]) == 16 && binary.BigEndian.Uint32(first[4:]) == 80877102 {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		mu.Lock()
		servers = append(servers, s)
		mu.Unlock()
		go io.Copy(c, s)
		s.Write(first[:])
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
				if bytes.Contains(buf[:n], []byte("CREATE DATABASE")) && bytes.Contains(buf[:n], []byte(trigger)) {
					return // the client is gone; the server keeps its session
				}
			}
			if err != nil {
				s.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return strings.Replace(url, target, ln.Addr().String(), 1)
}

// A run killed between its CREATE DATABASE and the marker leaves a
// database without the marker, which its template names: prune, and the
// next run on the server, drop it; a database without the marker that no
// template names stays, though its name has the same dead owner's key.
func TestADatabaseKilledBeforeItsMarkerIsDroppedByItsTemplatesWord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, unmarked := userServer(t)

	killed, lookalike := killedMidCreate(t, url, admin)
	requirePresent(t, databases(t, admin), []string{killed, lookalike}, "right after the kill")
	prunePendingOrphan(t, url, admin, killed, lookalike, "unmarked database", unmarked)

	killed2, lookalike2 := killedMidCreate(t, url, admin)
	next, err := Start(ctx, Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	have := databases(t, admin)
	requireAbsent(t, have, []string{killed2}, "after the next run started")
	requirePresent(t, have, append([]string{lookalike, lookalike2}, unmarked...), "after the next run started")
}

// prune may come while a killed run's CREATE DATABASE still runs on the
// server (under load it takes seconds): the database is not there yet when
// prune lists the databases. prune drops the run's template first, which
// waits for the CREATE from it to finish, and only then looks for the
// databases the template names: the new one is dropped. The CREATE is held
// by a lock on pg_database, which prune's own drops wait for too.
func TestPruneDuringAKilledRunsCreateDropsWhatItCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, _ := userServer(t)
	s, err := Start(ctx, Options{URL: cuttingProxy(t, url, "doomed")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateDatabase(ctx, testTemplate, "first"); err != nil {
		t.Fatal(err)
	}
	blockConn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer blockConn.Close(ctx)
	blocker, err := blockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "LOCK TABLE pg_catalog.pg_database IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDatabase(ctx, testTemplate, "doomed"); err == nil {
		t.Fatal("the CREATE DATABASE of the doomed database succeeded through a proxy that cut it off")
	}
	waitFor(t, admin, "the doomed CREATE DATABASE to wait for pg_database",
		"SELECT least(count(*), 1) FROM pg_stat_activity WHERE query LIKE 'CREATE DATABASE%doomed%' AND wait_event_type = 'Lock'", 1)
	releaseOwner(t, s, admin)

	type result struct {
		found []Leftover
		err   error
	}
	pruned := make(chan result, 1)
	go func() {
		_, found, err := PruneServer(ctx, url, false)
		pruned <- result{found, err}
	}()
	waitFor(t, admin, "prune to wait for pg_database too",
		"SELECT least(count(*), 1) FROM pg_stat_activity WHERE (query LIKE 'DROP DATABASE%' OR query LIKE 'ALTER DATABASE%') AND wait_event_type = 'Lock'", 1)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-pruned:
	case <-time.After(time.Minute):
		t.Fatal("prune did not finish within a minute of the lock's release")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	doomed := s.owner.name("doomed_")
	for _, n := range databases(t, admin) {
		if strings.HasPrefix(n, s.owner.name("")) {
			t.Errorf("after prune, the killed run's %s is still there", n)
		}
	}
	dropped := false
	for _, l := range r.found {
		dropped = dropped || strings.HasPrefix(l.Name, doomed) && l.Pending && l.Dropped
	}
	if !dropped {
		t.Errorf("prune did not report the doomed database as dropped: %+v", r.found)
	}
}

// The first CREATE DATABASE of a run, its template's scratch database, has
// no template of the run's to be named in: a run killed during it left an
// unmarked database that nothing would drop. The run writes the name down
// on this machine first (pendfile.go); prune drops that database, keeps a
// look-alike under the same dead key that was never written down, and
// forgets the record.
func TestATemplatesOwnCreateKilledBeforeItsMarkerIsDroppedByThisMachinesRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin, unmarked := userServer(t)
	s, err := Start(ctx, Options{URL: cuttingProxy(t, url, "_build_")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateDatabase(ctx, testTemplate, "first"); err == nil {
		t.Fatal("the template's build succeeded through a proxy that cut its CREATE DATABASE off")
	}
	prefix := s.owner.name("build_")
	waitFor(t, admin, "the server to finish the CREATE DATABASE of the template's scratch database",
		"SELECT count(*) FROM pg_database WHERE starts_with(datname, '"+prefix+"')", 1)
	var killed string
	for _, n := range databases(t, admin) {
		if strings.HasPrefix(n, prefix) {
			killed = n
		}
	}
	if c := commentOf(t, admin, killed); c != "" {
		t.Fatalf("the scratch database of the cut-off CREATE has a comment: %q", c)
	}
	lookalike := s.owner.name("build_" + randHex(4))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+quote(lookalike)); err != nil {
		t.Fatal(err)
	}
	releaseOwner(t, s, admin)
	if _, ok := recordAge(killed); !ok {
		t.Fatalf("no record of %s on this machine: its CREATE was cut off before it was marked", killed)
	}
	prunePendingOrphan(t, url, admin, killed, lookalike, "scratch database", unmarked)
	if _, ok := recordAge(killed); ok {
		t.Errorf("the record of %s outlived its database", killed)
	}
}
