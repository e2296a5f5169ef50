package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// PruneServer lists the bank_sim_* databases on the server at url and,
// unless dryRun, drops the orphans among them (owner.go): the databases of
// bank-sim processes that have ended. It never touches a database whose
// process is alive, one that anyone is connected to, or one without an
// owner mark. It returns a description of the server (no credentials) and
// every bank_sim_* database with its state. An unreachable server is an
// error that wraps ErrUnavailable.
func PruneServer(ctx context.Context, url string, dryRun bool) (string, []Leftover, error) {
	cfg, err := pgx.ParseConfig(withConnectTimeout(url))
	if err != nil {
		return "", nil, unavailable("DATABASE_URL / --database-url is not a valid connection string: %v", err)
	}
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", nil, reachError(cfg, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return "", nil, unavailable("PostgreSQL at %s: %v", where, err)
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0]
	}
	desc := fmt.Sprintf("PostgreSQL %s at %s", version, where)
	found, pending, err := listLeftovers(ctx, conn)
	if err != nil {
		return desc, nil, fmt.Errorf("listing the databases on %s: %w", desc, err)
	}
	return desc, dropOrphans(ctx, conn, found, pending, dryRun), nil
}

// CacheSlot is one embedded cluster slot in the cache directory.
type CacheSlot struct {
	Path  string // absolute
	Bytes int64  // the size of its files
	InUse bool   // a running bank-sim holds it; never touched
	// Removed is set once its cluster has been deleted; Err when that failed.
	Removed bool
	Err     error
}

// PruneCache lists the cluster slots in the embedded cache (dir, or the
// default as Start would choose it) and, unless dryRun, deletes the
// clusters of those no running bank-sim holds: everything in them (the
// cluster, its templates of any schema version) is rebuilt by the next run
// that needs it, in about a second. A slot in use is never touched: its
// lock is taken before anything in it is deleted, and kept until the end.
// It returns the cache directory it looked at.
func PruneCache(dir string, dryRun bool) (string, []CacheSlot, error) {
	dir, err := resolveCacheDir(dir)
	if err != nil {
		return "", nil, err
	}
	var paths []string
	majors, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return dir, nil, nil
	}
	if err != nil {
		return dir, nil, fmt.Errorf("cannot read the cache %s: %v; run prune as the user that ran bank-sim", dir, err)
	}
	for _, m := range majors {
		if !m.IsDir() || !strings.HasPrefix(m.Name(), "pg") {
			continue
		}
		slots, err := os.ReadDir(filepath.Join(dir, m.Name()))
		if err != nil {
			return dir, nil, fmt.Errorf("cannot read the cache %s: %v; run prune as the user that ran bank-sim", dir, err)
		}
		for _, sl := range slots {
			if sl.IsDir() && strings.HasPrefix(sl.Name(), "slot-") {
				paths = append(paths, filepath.Join(dir, m.Name(), sl.Name()))
			}
		}
	}
	sort.Slice(paths, func(i, j int) bool { return slotLess(paths[i], paths[j]) })
	var slots []CacheSlot
	for _, path := range paths {
		slots = append(slots, pruneSlot(path, dryRun))
	}
	return dir, slots, nil
}

// slotLess orders pg15/slot-2 before pg15/slot-10.
func slotLess(a, b string) bool {
	da, db := filepath.Dir(a), filepath.Dir(b)
	if da != db {
		return da < db
	}
	na, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(a), "slot-"))
	nb, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(b), "slot-"))
	return na < nb
}

func pruneSlot(path string, dryRun bool) CacheSlot {
	s := CacheSlot{Path: path}
	// Not created if missing: a root-owned lock file in a slot that
	// belongs to nobody would lock every later supervisor out of it.
	f, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDWR, 0)
	if err != nil {
		s.Err = fmt.Errorf("cannot open its lock file, so it is left alone: %v", err)
		s.Bytes = sizeOf(path)
		return s
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		s.InUse = errors.Is(err, syscall.EWOULDBLOCK)
		if !s.InUse {
			s.Err = fmt.Errorf("cannot lock it: %v", err)
		}
		s.Bytes = sizeOf(path)
		return s
	}
	// We hold the slot now: no bank-sim can start in it until we are done.
	s.Bytes = sizeOf(path)
	if dryRun || s.Bytes == 0 {
		return s
	}
	// A server an older bank-sim left running (pg_ctl detached it), or a
	// pair's, still in its immediate shutdown.
	// One that cannot be stopped may still run on its cluster: nothing in
	// the slot is removed then.
	stops := []error{stopStale(filepath.Join(path, "data"))}
	for _, d := range pairDataDirs(path) {
		stops = append(stops, stopStale(d))
	}
	if err := errors.Join(stops...); err != nil {
		s.Err = err
		return s
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		s.Err = err
		return s
	}
	var errs []error
	for _, e := range entries {
		// The lock file stays: a process that opened it before we
		// deleted it would otherwise lock a file nobody else sees.
		if e.Name() == "lock" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	s.Err = errors.Join(errs...)
	s.Removed = s.Err == nil
	return s
}

// sizeOf is the total size of the regular files under path.
func sizeOf(path string) int64 {
	var n int64
	filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
