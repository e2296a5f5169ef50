package mistakes_test

import (
	"reflect"
	"testing"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
)

// applied is a fresh handler with b switched on.
func applied(b mistakes.Bug) idem.Handler {
	var h idem.Handler
	b.Apply(&h)
	return h
}

// Each flaw of the bank and of the key store, set alone in a bug, is
// switched on in the handler Apply gives it, and no other: a flaw Apply
// forgets runs the correct code under the mistake's name (every scenario
// passes, every chaos run is VALID, and the audit calls it missed, not
// unwired); a flaw carried into another's field runs the wrong mistake.
func TestApplyCarriesEachFlawAndOnlyIt(t *testing.T) {
	bankFlaws := reflect.TypeFor[bank.Flaws]()
	for i := range bankFlaws.NumField() {
		var b mistakes.Bug
		reflect.ValueOf(&b.Bank).Elem().Field(i).SetBool(true)
		h := applied(b)
		if h.Bank != b.Bank || h.Store.Flaws != (idem.Flaws{}) {
			t.Errorf("Bug.Bank.%s alone: the handler has bank %+v and store %+v, want bank %+v and a correct store", bankFlaws.Field(i).Name, h.Bank, h.Store.Flaws, b.Bank)
		}
	}
	storeFlaws := reflect.TypeFor[idem.Flaws]()
	for i := range storeFlaws.NumField() {
		var b mistakes.Bug
		reflect.ValueOf(&b.Store).Elem().Field(i).SetBool(true)
		h := applied(b)
		if h.Store.Flaws != b.Store || h.Bank != (bank.Flaws{}) {
			t.Errorf("Bug.Store.%s alone: the handler has store %+v and bank %+v, want store %+v and a correct bank", storeFlaws.Field(i).Name, h.Store.Flaws, h.Bank, b.Store)
		}
	}
}

// Each switch of the handler's own that a bug can set (a bool of Bug
// named as a bool of idem.Handler) reaches that field and changes nothing
// else. The bug's other bools are read by someone else (the client, the
// failover's standby), and MemoryKeys gives the handler a map of its own.
func TestApplyCarriesEachHandlerSwitch(t *testing.T) {
	readElsewhere := map[string]bool{"NewKeyPerAttempt": true, "NewKeyAfterServerError": true, "AsyncReplication": true}
	correct := applied(mistakes.Bug{})
	bug := reflect.TypeFor[mistakes.Bug]()
	for i := range bug.NumField() {
		f := bug.Field(i)
		if f.Type.Kind() != reflect.Bool || readElsewhere[f.Name] {
			continue
		}
		var b mistakes.Bug
		reflect.ValueOf(&b).Elem().Field(i).SetBool(true)
		h := applied(b)
		if f.Name == "MemoryKeys" {
			if h.Memory == nil {
				t.Errorf("Bug.MemoryKeys: the handler has no memory store")
			}
			continue
		}
		sw := reflect.ValueOf(&h).Elem().FieldByName(f.Name)
		if !sw.IsValid() || sw.Kind() != reflect.Bool {
			t.Errorf("Bug.%s: idem.Handler has no switch of that name for Apply to carry it to (if something else reads it, list it here as read elsewhere)", f.Name)
			continue
		}
		if !sw.Bool() {
			t.Errorf("Bug.%s alone: Apply left the handler's %s off", f.Name, f.Name)
		}
		sw.SetBool(false)
		if !reflect.DeepEqual(h, correct) {
			t.Errorf("Bug.%s alone: Apply changed more of the handler than its %s: %+v", f.Name, f.Name, h)
		}
	}
}

// Every mistake of the catalogue changes something: the handler Apply
// gives it, or a part Apply leaves to whoever builds it (the client, the
// standby, the outbox, the API). One that changes nothing is the correct
// code under a mistake's name.
func TestEveryMistakeSwitchesSomethingOn(t *testing.T) {
	correct := applied(mistakes.Bug{})
	for _, b := range mistakes.All() {
		handler := !reflect.DeepEqual(applied(b), correct)
		elsewhere := b.NewKeyPerAttempt || b.NewKeyAfterServerError || b.AsyncReplication || b.Outbox != (outbox.Flaws{}) || b.API != (api.Flaws{})
		if !handler && !elsewhere {
			t.Errorf("%s switches nothing on: Apply leaves the handler correct, and it sets no client, standby, outbox or API flaw", b.Name)
		}
	}
}
