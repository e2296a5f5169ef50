package postgres

import (
	"os"
	"path/filepath"
	"time"
)

// The first CREATE DATABASE of a run on a server it does not own, its
// template's scratch database, has no template of bank-sim's to be named
// in (pending.go): there is nothing of the run's on the server yet. Its
// name is written here instead, on the machine the run runs on, before
// the CREATE is sent, and removed once the database carries the marker or
// the server refused it. prune, and the next run, on this machine, read
// the names back: an unmarked database of that exact name, whose owner key
// no session holds, is the run's (its random name was written down before
// the database existed). A run killed on another machine leaves its record
// there; from here that database is listed, never dropped.

// pendingDir is where the records are: one empty file per name.
var pendingDir = func() string {
	dir, err := resolveCacheDir("")
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "pending-databases")
}

// pendingRecordTTL is how long a record whose database never appeared is
// kept: long past any CREATE DATABASE a dead client could have left
// running, so that a record is never removed before its database shows.
const pendingRecordTTL = 24 * time.Hour

// recordPending writes name down before its CREATE DATABASE; forget
// removes the record. A record that cannot be written is not an error:
// the run goes on with the window this file closes left open.
func recordPending(name string) (forget func()) {
	dir := pendingDir()
	if dir == "" || os.MkdirAll(dir, 0o700) != nil {
		return func() {}
	}
	path := filepath.Join(dir, name)
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		f.Close()
		return func() { os.Remove(path) }
	}
	return func() {}
}

// recordedPending returns the names recorded here: only names under an
// owner key (bank_sim_<key>_…) count.
func recordedPending() []string {
	dir := pendingDir()
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if _, ok := ownerOf(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out
}

// recordedHere stands, in the pending names' map, for the template of a
// name this machine recorded (it has none).
const recordedHere = ""

// recordAge is how old name's record is, if there is one.
func recordAge(name string) (time.Duration, bool) {
	dir := pendingDir()
	if dir == "" {
		return 0, false
	}
	info, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	return time.Since(info.ModTime()), true
}

// forgetRecorded removes name's record.
func forgetRecorded(name string) {
	if dir := pendingDir(); dir != "" {
		os.Remove(filepath.Join(dir, name))
	}
}
