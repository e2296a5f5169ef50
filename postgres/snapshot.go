package postgres

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/banksim/bank-sim/postgres/internal/snapshot"
)

// snapshots are pristine clusters made by initdb with bank-sim's own
// arguments (go run ./postgres/internal/snapshot/mksnapshot), one per
// PostgreSQL major version and architecture. Unpacking one takes about a
// tenth of initdb's time; a cluster's files are the same for every minor
// release of a major version, and the server checks the rest (catalog
// version, alignment, block size) when it starts, refusing a snapshot that
// does not fit, in which case the supervisor runs initdb after all.
//
//go:embed snapshots/*.tar.gz
var snapshots embed.FS

// snapshotOff in supConfig.Snapshot makes every new cluster with initdb.
const snapshotOff = "off"

// errNoSnapshot means no snapshot fits these binaries: not a failure.
var errNoSnapshot = errors.New("no snapshot for this PostgreSQL version and architecture")

// openSnapshot returns the snapshot to unpack: the file named by
// cfg.Snapshot (tests), or the built-in one for cfg.Major and GOARCH.
func (sv *supervisor) openSnapshot() (io.ReadCloser, string, error) {
	switch sv.cfg.Snapshot {
	case snapshotOff:
		return nil, "", errNoSnapshot
	case "":
		name := fmt.Sprintf("snapshots/pg%d-%s.tar.gz", sv.cfg.Major, runtime.GOARCH)
		f, err := snapshots.Open(name)
		if err != nil {
			return nil, "", errNoSnapshot
		}
		return f, "bank-sim's built-in " + filepath.Base(name), nil
	default:
		// A FIFO or a device would block the start or never end; only a
		// regular file can be a snapshot.
		if fi, err := os.Stat(sv.cfg.Snapshot); err == nil && !fi.Mode().IsRegular() {
			return nil, sv.cfg.Snapshot, fmt.Errorf("%s is not a regular file; name a snapshot made by mksnapshot", sv.cfg.Snapshot)
		}
		f, err := os.Open(sv.cfg.Snapshot)
		return f, sv.cfg.Snapshot, err
	}
}

// unpackSnapshot makes dataDir from a snapshot instead of
// initdb, and gives the cluster its own password before any server of it
// listens: the snapshot's password was random and forgotten. Like initdb it
// builds beside the data directory and renames into place.
func (sv *supervisor) unpackSnapshot(dataDir, pw string) (string, error) {
	r, name, err := sv.openSnapshot()
	if err != nil {
		return "", err
	}
	defer r.Close()
	os.RemoveAll(dataDir)
	building := dataDir + ".unpack"
	os.RemoveAll(building)
	if err := snapshot.Unpack(r, building); err != nil {
		os.RemoveAll(building)
		return "", fmt.Errorf("unpacking %s: %v", name, err)
	}
	if err := sv.setPassword(building, pw); err != nil {
		os.RemoveAll(building)
		return "", fmt.Errorf("%s: %v", name, err)
	}
	if err := os.Rename(building, dataDir); err != nil {
		os.RemoveAll(building)
		return "", err
	}
	return name, nil
}

// setPassword sets the postgres role's password in PostgreSQL's
// single-user mode: no server listens, so no one can log in with the
// snapshot's password in between. The server also checks here that the
// files fit its binaries, and refuses them if not.
func (sv *supervisor) setPassword(dataDir, pw string) error {
	if strings.ContainsAny(pw, `'\`) {
		return errors.New("password must not contain quotes or backslashes")
	}
	cmd := exec.Command(filepath.Join(sv.binPath, "bin", "postgres"), "--single",
		"-D", dataDir, "-F", "-c", "exit_on_error=on", "-c", "log_min_messages=warning", "postgres")
	cmd.Dir = filepath.Dir(dataDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdin = strings.NewReader("ALTER ROLE postgres PASSWORD '" + pw + "'\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		// The statement echoes nowhere, but never print the password.
		msg := strings.ReplaceAll(strings.TrimSpace(out.String()), pw, "…")
		return fmt.Errorf("PostgreSQL refused it in single-user mode: %v: %s", err, msg)
	}
	return nil
}
