package netns

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeNamespaces stands in for /run/netns and ip netns del: now maps each
// name to the inode of the namespace that has it now; deleted collects
// what was deleted, by name.
func fakeNamespaces(t *testing.T, now map[string]uint64) *[]string {
	t.Helper()
	var deleted []string
	identity, del := nsIdentity, nsDelete
	t.Cleanup(func() { nsIdentity, nsDelete = identity, del })
	nsIdentity = func(name string) (uint64, error) {
		if ino, ok := now[name]; ok {
			return ino, nil
		}
		return 0, os.ErrNotExist
	}
	nsDelete = func(_ context.Context, name string) error {
		deleted = append(deleted, name)
		delete(now, name)
		return nil
	}
	return &deleted
}

// A run's namespace that someone replaced by one of the same name after
// the run recorded it (another inode), and one whose inode the run never
// recorded, are not the run's: neither Close nor prune deletes them. The
// run's own, still there under its recorded inode, is deleted. No root
// needed: the namespaces are the fake's.
func TestANamespaceReplacedUnderItsNameIsNotDeleted(t *testing.T) {
	const id = "abc123"
	own, replaced, unrecorded := nsPrefix+id+"-app1", nsPrefix+id+"-app2", nsPrefix+id+"-app3"
	records := []nsRecord{{Name: own, Inode: 41}, {Name: replaced, Inode: 42}, {Name: unrecorded}}
	namespaces := func() map[string]uint64 {
		return map[string]uint64{own: 41, replaced: 52, unrecorded: 77}
	}

	t.Run("close", func(t *testing.T) {
		deleted := fakeNamespaces(t, namespaces())
		f, err := os.CreateTemp(t.TempDir(), "*.json")
		if err != nil {
			t.Fatal(err)
		}
		n := &Net{id: id, file: f, st: state{ID: id, Namespaces: slices.Clone(records)}}
		err = n.Close()
		if !slices.Equal(*deleted, []string{own}) {
			t.Errorf("Close deleted %v; want only the run's own %s", *deleted, own)
		}
		if !errors.Is(err, errNotOurs) {
			t.Errorf("Close: %v; want it to say that the replaced and the unrecorded namespaces are not the run's", err)
		}
	})

	t.Run("prune", func(t *testing.T) {
		for _, dry := range []bool{true, false} {
			deleted := fakeNamespaces(t, namespaces())
			path := filepath.Join(t.TempDir(), id+".json")
			b, _ := json.Marshal(state{ID: id, Namespaces: records})
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			got := map[string]Leftover{}
			for _, l := range pruneRun(path, dry, map[string]bool{}) {
				got[l.Name] = l
			}
			want := []string{own}
			if dry {
				want = nil
			}
			if !slices.Equal(*deleted, want) {
				t.Errorf("dryRun=%v: prune deleted %v; want %v", dry, *deleted, want)
			}
			if l := got[own]; l.State != Removed || l.Err != nil {
				t.Errorf("dryRun=%v: the run's own namespace is %+v; want removed", dry, l)
			}
			for _, name := range []string{replaced, unrecorded} {
				if l := got[name]; l.State != Foreign {
					t.Errorf("dryRun=%v: %s is %+v; want Foreign, left alone", dry, name, l)
				}
			}
		}
	})
}
