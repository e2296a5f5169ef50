package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

type binaries struct {
	path     string // contains bin/pg_ctl (or will, after a download)
	download bool
	version  embeddedpostgres.PostgresVersion
	major    int
}

func hasPgCtl(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "bin", "pg_ctl"))
	return err == nil && !fi.IsDir()
}

func resolveBinaries(ctx context.Context, explicit string) (binaries, error) {
	from := "Options.BinariesPath"
	if explicit == "" {
		explicit, from = os.Getenv("BANK_SIM_PG_BINARIES"), "BANK_SIM_PG_BINARIES"
	}
	if explicit != "" {
		if !hasPgCtl(explicit) {
			return binaries{}, unavailable("%s=%s has no bin/pg_ctl; point it at a PostgreSQL installation directory (the parent of bin/)", from, explicit)
		}
		return localBinaries(ctx, explicit)
	}
	for major := 18; major >= 13; major-- {
		dir := fmt.Sprintf("/usr/lib/postgresql/%d", major)
		if hasPgCtl(dir) {
			return localBinaries(ctx, dir)
		}
	}
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dir := filepath.Dir(strings.TrimSpace(string(out)))
		if hasPgCtl(dir) {
			return localBinaries(ctx, dir)
		}
	}
	// Last resort: embedded-postgres downloads its default version from
	// Maven Central into the cache (fails offline; the error says so).
	return binaries{download: true, version: embeddedpostgres.V18, major: 18}, nil
}

// minMajor is the oldest PostgreSQL major version bank-sim runs on.
const minMajor = 13

var versionRE = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?`)

func localBinaries(ctx context.Context, dir string) (binaries, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return binaries{}, unavailable("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "bin", "pg_ctl"), "--version").Output()
	if err != nil {
		return binaries{}, unavailable("running %s/bin/pg_ctl --version: %v", dir, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return binaries{}, unavailable("cannot parse %q from %s/bin/pg_ctl --version", strings.TrimSpace(string(out)), dir)
	}
	major, _ := strconv.Atoi(m[1])
	// 13 for DROP DATABASE … WITH (FORCE), which dropping a bank needs.
	if major < minMajor {
		return binaries{}, unavailable("PostgreSQL %d at %s is too old; bank-sim needs %d or newer", major, dir, minMajor)
	}
	return binaries{path: dir, version: libVersion(major), major: major}, nil
}

// libVersion maps a major version to embedded-postgres's constant; the
// library only compares it with PG_VERSION (prefix), so a synthetic value
// works for majors it does not know yet.
func libVersion(major int) embeddedpostgres.PostgresVersion {
	switch major {
	case 18:
		return embeddedpostgres.V18
	case 17:
		return embeddedpostgres.V17
	case 16:
		return embeddedpostgres.V16
	case 15:
		return embeddedpostgres.V15
	case 14:
		return embeddedpostgres.V14
	case 13:
		return embeddedpostgres.V13
	case 12:
		return embeddedpostgres.V12
	case 11:
		return embeddedpostgres.V11
	case 10:
		return embeddedpostgres.V10
	}
	return embeddedpostgres.PostgresVersion(fmt.Sprintf("%d.0.0", major))
}

func resolveCacheDir(explicit string) (string, error) {
	dir := explicit
	if dir == "" {
		dir = os.Getenv("BANK_SIM_CACHE_DIR")
	}
	if dir == "" {
		if os.Geteuid() == 0 {
			dir = "/var/cache/bank-sim"
		} else {
			base, err := os.UserCacheDir()
			if err != nil {
				return "", unavailable("no cache directory (%v); set BANK_SIM_CACHE_DIR", err)
			}
			dir = filepath.Join(base, "bank-sim")
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", unavailable("cache dir %s: %v", dir, err)
	}
	return abs, nil
}

// CacheDir is the cache directory Start and PruneCache use: explicit, else
// $BANK_SIM_CACHE_DIR, else /var/cache/bank-sim as root, else the user's
// cache dir. Others that leave state a killed run must prune (faults/netns)
// keep it here too.
func CacheDir(explicit string) (string, error) { return resolveCacheDir(explicit) }
