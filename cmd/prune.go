package cmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/spf13/cobra"
)

func newPruneCmd(app *App) *cobra.Command {
	var dryRun bool
	c := &cobra.Command{
		Use:   "prune",
		Short: "Remove what killed bank-sim runs left: databases on a server, clusters in the cache",
		Long: `Remove what bank-sim runs that were killed (kill -9, a crash, a closed CI
job) left behind, and say how much space that freed:

- in the embedded cache (BANK_SIM_CACHE_DIR, else /var/cache/bank-sim as
  root, else your cache dir): the cluster of every slot that no running
  bank-sim holds, about 60 MB each, with its templates of any schema version.
  The next run builds a new cluster in about a second. A server still
  running on one is stopped first, when proven its postmaster (named by its
  postmaster.pid, a postgres started when that file says, working in that
  data directory); a slot whose postmaster.pid names a postgres that
  cannot be proven so is kept, and listed as failed with why.
- in the temporary directory: the pg_auto_failover and Patroni clusters of
  killed HA test runs (bank-sim-ha-*), killing the processes bank-sim recorded when it
  started them there (by pid and start time) that still run, and stopping
  a postmaster their killed agent left running on a data directory there
  (named by its postmaster.pid, a postgres started after the directory and
  working in that data directory); a directory without the mark bank-sim
  wrote when it made it (a look-alike, a copy) is kept, with its
  processes, and so is one a postgres that cannot be proven bank-sim's may
  still run on. Listed only when there are some.
- on the server at --database-url / DATABASE_URL, if one is given: every
  database bank-sim created whose bank-sim run has ended. bank-sim writes a
  marker in the comment of each database it creates (bound to that
  database, so a name or a copied comment proves nothing), and each run
  holds an advisory lock, whose key is in its databases' names, while it
  runs.

Never touched: a slot or a database in use by a running bank-sim, a
database anyone is connected to, and every database without bank-sim's
marker, whatever its name (your own, or an older bank-sim's: prune prints
the SQL to drop those named bank_sim_*).

Exit code 0 when everything found could be removed, 1 when something could
not, 3 when the server cannot be reached.`,
		Example: `  bank-sim prune --dry-run                      what would be removed
  bank-sim prune                                remove the cache's unused clusters
  bank-sim prune --database-url postgres://…    and the leftovers on that server`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runPrune(c, app, dryRun)
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed; remove nothing")
	return c
}

// pruneTally adds up what prune removed (or would remove).
type pruneTally struct {
	clusters, databases int
	netns               int // namespaces of killed partitioned runs
	bytes               int64
	failed              int
}

func runPrune(c *cobra.Command, app *App, dryRun bool) error {
	out, p := app.Env.Stdout, app.palette()
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	var t pruneTally

	dir, slots, err := postgres.PruneCache(app.Env.Getenv("BANK_SIM_CACHE_DIR"), dryRun)
	if dir == "" {
		fmt.Fprintf(out, "%s\n", p.bold.Sprint("embedded clusters"))
	} else {
		fmt.Fprintf(out, "%s\n", p.bold.Sprint("embedded clusters in "+dir))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	cacheErr := err
	switch {
	case err != nil:
		// Said, and the server (if any) still checked.
		fmt.Fprintf(tw, "  %s\t%v\n", p.bad.Sprint("failed"), err)
	case len(slots) == 0:
		fmt.Fprintln(tw, "  none")
	}
	for _, s := range slots {
		name, _ := filepath.Rel(dir, s.Path)
		switch {
		case s.InUse:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", "kept", name, size(s.Bytes), "in use by a running bank-sim")
		case s.Err != nil:
			t.failed++
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.bad.Sprint("failed"), name, size(s.Bytes), s.Err)
		case s.Bytes == 0:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", "empty", name, "", "no cluster in it")
		default:
			t.clusters++
			t.bytes += s.Bytes
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.ok.Sprint(verb), name, size(s.Bytes), "no running bank-sim uses it")
		}
	}
	tw.Flush()
	pruneHA(app, p, dryRun, verb, &t)

	nsDir := ""
	if cdir, err := postgres.CacheDir(app.Env.Getenv("BANK_SIM_CACHE_DIR")); err == nil {
		nsDir = netns.StateDir(cdir)
	}
	if nsDir != "" {
		t.networks(out, p, nsDir, verb, dryRun)
	}

	var unreachable error
	if url := app.externalURL(); url == "" {
		fmt.Fprintln(out, p.dim.Sprint("no --database-url or DATABASE_URL: no server checked"))
	} else {
		desc, found, err := postgres.PruneServer(c.Context(), url, dryRun)
		switch {
		case errors.Is(err, postgres.ErrUnavailable):
			unreachable = app.databaseError(err)
		case err != nil:
			return &ExitError{Code: ExitFailed, Err: err}
		default:
			fmt.Fprintf(out, "%s\n", p.bold.Sprint(desc+" (--database-url / DATABASE_URL)"))
			printLeftovers(out, p, found, verb, &t)
		}
	}

	var what []string
	if t.clusters > 0 {
		what = append(what, fmt.Sprintf("%d %s", t.clusters, plural(t.clusters, "cluster", "clusters")))
	}
	if t.netns > 0 {
		what = append(what, fmt.Sprintf("%d network %s", t.netns, plural(t.netns, "namespace", "namespaces")))
	}
	if t.databases > 0 {
		what = append(what, fmt.Sprintf("%d %s", t.databases, plural(t.databases, "database", "databases")))
	}
	summary := fmt.Sprintf("removed %s, %s freed", strings.Join(what, " and "), size(t.bytes))
	if t.clusters+t.databases == 0 {
		summary = "removed " + strings.Join(what, " and ") // namespaces free no disk
	}
	switch {
	case len(what) == 0 && (cacheErr != nil || unreachable != nil):
		summary = "nothing removed"
	case len(what) == 0:
		summary = "nothing to remove"
	case dryRun:
		summary = fmt.Sprintf("would remove %s, %s; run without --dry-run to remove %s", strings.Join(what, " and "), size(t.bytes),
			plural(t.clusters+t.databases+t.netns, "it", "them"))
	}
	fmt.Fprintln(out, summary)
	if unreachable != nil {
		return &ExitError{Code: ExitDatabase, Err: unreachable}
	}
	if cacheErr != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("the embedded cache could not be pruned (see above)")}
	}
	if t.failed > 0 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%d %s could not be removed (see above)", t.failed, plural(t.failed, "leftover", "leftovers"))}
	}
	return nil
}

func printLeftovers(out io.Writer, p *palette, found []postgres.Leftover, verb string, t *pruneTally) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	if len(found) == 0 {
		fmt.Fprintln(tw, "  no bank_sim_* databases")
		return
	}
	// What is removed first, then what is kept and why.
	rank := func(l postgres.Leftover) int {
		if l.Err != nil {
			return -1
		}
		return int(l.State)
	}
	sort.SliceStable(found, func(i, j int) bool { return rank(found[i]) < rank(found[j]) })
	for _, l := range found {
		what := ""
		if l.Template {
			what = "template, "
		}
		switch {
		case l.Err != nil:
			t.failed++
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.bad.Sprint("failed"), l.Name, size(l.Bytes), l.Err)
		case l.State == postgres.Orphan:
			t.databases++
			t.bytes += max(l.Bytes, 0)
			why := "its bank-sim run has ended"
			if l.Pending {
				why = "its bank-sim run was killed during its CREATE DATABASE, before its marker (its template named it)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.ok.Sprint(verb), l.Name, size(l.Bytes), what+why)
		case l.State == postgres.OrphanInUse:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", "kept", l.Name, size(l.Bytes),
				fmt.Sprintf("%sits bank-sim run has ended, but %d %s connected to it", what, l.Sessions, plural(l.Sessions, "session is", "sessions are")))
		case l.State == postgres.Live:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", "kept", l.Name, size(l.Bytes), what+"in use by a running bank-sim")
		default:
			drop := `DROP DATABASE "` + l.Name + `";`
			if l.Template {
				drop = `ALTER DATABASE "` + l.Name + `" IS_TEMPLATE false; ` + drop
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", "kept", l.Name, size(l.Bytes),
				what+"not created by bank-sim (no bank-sim marker in its comment): yours, or an older bank-sim's; to drop it: "+drop)
		}
	}
}

// pruneHA removes the pg_auto_failover and Patroni clusters that killed HA test runs
// left in the temporary directory; it prints nothing when there are none,
// the usual case.
func pruneHA(app *App, p *palette, dryRun bool, verb string, t *pruneTally) {
	found, err := hacluster.Prune(app.Env.Getenv("TMPDIR"), dryRun)
	if len(found) == 0 && err == nil {
		return
	}
	out := app.Env.Stdout
	fmt.Fprintf(out, "%s\n", p.bold.Sprint("HA test clusters (pg_auto_failover, Patroni)"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	if err != nil {
		t.failed++
		fmt.Fprintf(tw, "  %s\t%v\n", p.bad.Sprint("failed"), err)
	}
	for _, l := range found {
		if l.Kept != nil {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tnot provably bank-sim's (%s): remove it yourself if it is\n", p.dim.Sprint("kept"), visible(l.Dir), size(l.Bytes), visible(l.Kept.Error()))
			continue
		}
		if l.Running != nil {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tits run has ended, but a PostgreSQL server may still run on it: %s; not stopped: stop it and remove the directory yourself if it is bank-sim's\n",
				p.dim.Sprint("kept"), visible(l.Dir), size(l.Bytes), visible(l.Running.Error()))
			continue
		}
		why := "its run has ended"
		if l.Killed > 0 {
			why += fmt.Sprintf("; %d %s still running in it, killed", l.Killed, plural(l.Killed, "process was", "processes were"))
		}
		for _, pm := range l.Postmasters {
			stopped := "stopped"
			if dryRun {
				stopped = "would be stopped"
			}
			why += fmt.Sprintf("; the postmaster of %s (pid %d), left running by its killed agent, %s", visible(pm.Node), pm.PID, stopped)
		}
		if l.Err != nil {
			t.failed++
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.bad.Sprint("failed"), l.Dir, size(l.Bytes), l.Err)
			continue
		}
		t.clusters++
		t.bytes += l.Bytes
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.ok.Sprint(verb), l.Dir, size(l.Bytes), why)
	}
}

// size prints a byte count the way du -h would, in binary units.
func size(n int64) string {
	switch {
	case n < 0:
		return "?"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// networks prunes the network namespaces and links of partitioned runs
// that were killed (faults/netns): only what a run's state file records,
// and only once its run has ended. Said only when there is something.
func (t *pruneTally) networks(out io.Writer, p *palette, dir, verb string, dryRun bool) {
	all, err := netns.Prune(dir, dryRun)
	if err != nil {
		return
	}
	// Only what this cache's state files record: a namespace merely named
	// like bank-sim's (the user's, or a test's with its state elsewhere)
	// is left alone and not worth a line.
	var found []netns.Leftover
	for _, l := range all {
		if l.Run != "" && l.State != netns.Gone {
			found = append(found, l)
		}
	}
	if len(found) == 0 {
		return
	}
	fmt.Fprintf(out, "%s\n", p.bold.Sprint("network namespaces of partitioned runs ("+dir+")"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	for _, l := range found {
		switch {
		case l.Err != nil:
			t.failed++
			fmt.Fprintf(tw, "  %s\t%s %s\t%v\n", p.bad.Sprint("failed"), l.Kind, l.Name, l.Err)
		case l.State == netns.Removed:
			if l.Kind == "namespace" {
				t.netns++
			}
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", p.ok.Sprint(verb), l.Kind, l.Name, "its bank-sim run has ended")
		case l.State == netns.Live:
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", "kept", l.Kind, l.Name, "in use by a running bank-sim")
		case l.State == netns.Foreign:
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", "kept", l.Kind, l.Name, "not the namespace or link its run made (another inode or index): left alone")
		}
	}
}

// visible is s, quoted when it holds a control character: the name of a
// directory bank-sim did not make is anyone's, and must not reach the
// terminal as escape sequences.
func visible(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
