// Command mksnapshot makes the pristine cluster that bank-sim unpacks on a
// first run instead of running initdb:
//
//	go run ./postgres/internal/snapshot/mksnapshot -bin /usr/lib/postgresql/15 -out postgres/snapshots
//
// It runs initdb with bank-sim's own arguments (as nobody when run as root,
// since initdb refuses root), with a random password that it then forgets:
// the snapshot's password is unknown to everyone, and bank-sim sets each
// cluster's own before the server first listens. The file is named
// pg<major>-<GOARCH>.tar.gz; bank-sim uses it only with binaries of that
// major version on that architecture, and falls back to initdb if the
// server refuses it.
//
// initdb leaves its WAL in the cluster: 5 MB of records in a 16 MB segment,
// none of which a server needs once initdb has shut the cluster down
// cleanly. mksnapshot replaces it with pg_resetwal (as pg_upgrade does to
// the clusters it makes), so the snapshot's segment is one page of records
// and zeros, which Unpack does not write; it checks with pg_controldata
// that the cluster is still cleanly shut down afterwards.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"

	"github.com/banksim/bank-sim/postgres/internal/snapshot"
)

func main() {
	bin := flag.String("bin", "/usr/lib/postgresql/15", "a PostgreSQL installation (the parent of bin/initdb)")
	out := flag.String("out", "postgres/snapshots", "directory to write pg<major>-<GOARCH>.tar.gz into")
	flag.Parse()
	if err := run(*bin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mksnapshot:", err)
		os.Exit(1)
	}
}

func run(bin, out string) error {
	work, err := os.MkdirTemp("", "mksnapshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		if err := os.Chmod(work, 0o755); err != nil {
			return err
		}
		if err := os.Chown(work, 65534, 65534); err != nil {
			return err
		}
	}
	pw := make([]byte, 24)
	rand.Read(pw)
	pwfile := filepath.Join(work, "pwfile")
	if err := os.WriteFile(pwfile, []byte(hex.EncodeToString(pw)), 0o600); err != nil {
		return err
	}
	if cred != nil {
		os.Chown(pwfile, 65534, 65534)
	}
	data := filepath.Join(work, "data")
	cmd := exec.Command(filepath.Join(bin, "bin", "initdb"), snapshot.InitdbArgs(pwfile, data)...)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb: %v: %s", err, log.String())
	}
	if _, err := runAs(cred, work, filepath.Join(bin, "bin", "pg_resetwal"), "-D", data); err != nil {
		return err
	}
	control, err := runAs(cred, work, filepath.Join(bin, "bin", "pg_controldata"), "-D", data)
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`(?m)^Database cluster state:\s+shut down$`).MatchString(control) {
		return fmt.Errorf("after pg_resetwal the cluster is not cleanly shut down:\n%s", control)
	}
	segments, err := filepath.Glob(filepath.Join(data, "pg_wal", "0*"))
	if err != nil || len(segments) != 1 {
		return fmt.Errorf("after pg_resetwal pg_wal holds %d segments, want 1 (%v)", len(segments), err)
	}
	major, err := os.ReadFile(filepath.Join(data, "PG_VERSION"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	name := filepath.Join(out, fmt.Sprintf("pg%s-%s.tar.gz", strings.TrimSpace(string(major)), runtime.GOARCH))
	var buf bytes.Buffer
	if err := snapshot.Pack(&buf, data); err != nil {
		return err
	}
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d bytes)\n", name, buf.Len())
	return nil
}

// runAs runs a PostgreSQL program with cred (nil: as this process) in the
// C locale, whose messages mksnapshot reads, and returns its output.
func runAs(cred *syscall.Credential, dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", filepath.Base(name), err, out)
	}
	return string(out), nil
}
