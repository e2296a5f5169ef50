package chaos

import (
	"slices"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5/pgconn"
)

// Which statements the model of row locks predicts for, and which rows it
// takes them to lock, in the order PostgreSQL locks them.
func TestRowLocksFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sql  string
		args []any
		want []int64 // nil: not predicted for
	}{
		{"lock both accounts, the higher id first in the arguments", bank.LockAccountsSQL, []any{int64(7), int64(3)}, []int64{3, 7}},
		{"lock both accounts, one account twice", bank.LockAccountsSQL, []any{int64(4), int64(4)}, []int64{4}},
		{"lock the sender", bank.LockSenderSQL, []any{int64(9)}, []int64{9}},
		{"the deadlock fault's lock, an int argument", "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE", []any{5}, []int64{5}},
		{"read both accounts (no lock)", "SELECT id, owner_id, status, balance_kobo FROM accounts WHERE id IN ($1::bigint, $2::bigint)", []any{int64(1), int64(2)}, nil},
		{"SKIP LOCKED waits for nothing", "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE SKIP LOCKED", []any{int64(1)}, nil},
		{"a condition beside the id", "SELECT 1 FROM accounts WHERE id = $1 AND status = 'active' FOR UPDATE", []any{int64(1)}, nil},
		{"another table", "SELECT 1 FROM idempotency_keys WHERE id = $1 FOR UPDATE", []any{int64(1)}, nil},
		{"an id that is not a number", bank.LockSenderSQL, []any{"9"}, nil},
		{"a missing argument", bank.LockAccountsSQL, []any{int64(1)}, nil},
	} {
		got, ok := rowLocksFor(tc.sql, tc.args)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}

// Which account rows a statement that returned left locked, as the model
// reads its answer; opaque for a statement on accounts it cannot read.
func TestRowsLocked(t *testing.T) {
	t.Parallel()
	tag := func(s string) result { return result{tag: pgconn.NewCommandTag(s)} }
	ids := func(vs ...any) result {
		b := &bufferedRows{fields: []pgconn.FieldDescription{{Name: "id"}}, tag: pgconn.NewCommandTag("SELECT 2")}
		for _, v := range vs {
			b.values = append(b.values, []any{v})
		}
		return result{rows: b}
	}
	returning := func(s string) result {
		return result{rows: &bufferedRows{fields: []pgconn.FieldDescription{{Name: "balance_kobo"}}, tag: pgconn.NewCommandTag(s)}}
	}
	for _, tc := range []struct {
		name   string
		sql    string
		args   []any
		res    result
		want   []int64
		opaque bool
	}{
		{"both accounts locked: the rows read", bank.LockAccountsSQL, []any{int64(8), int64(3)}, ids(int32(3), int32(8)), []int64{3, 8}, false},
		{"one of the two accounts does not exist", bank.LockAccountsSQL, []any{int64(8), int64(99)}, ids(int32(8)), []int64{8}, false},
		{"the deadlock fault's lock, by its tag", "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE", []any{int64(5)}, tag("SELECT 1"), []int64{5}, false},
		{"the deadlock fault's lock of no row", "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE", []any{int64(5)}, tag("SELECT 0"), nil, false},
		{"a debit that moved money", bank.DebitSQL, []any{int64(100), int64(6)}, returning("UPDATE 1"), []int64{6}, false},
		{"a debit refused for the balance locks nothing", bank.DebitSQL, []any{int64(100), int64(6)}, returning("UPDATE 0"), nil, false},
		{"a credit", bank.CreditSQL, []any{int64(100), int64(2)}, tag("UPDATE 1"), []int64{2}, false},
		{"a balance written back", "UPDATE accounts SET balance_kobo = $1 WHERE id = $2", []any{int64(100), int64(2)}, tag("UPDATE 1"), []int64{2}, false},
		{"the frozen sender", "UPDATE accounts SET status = 'frozen' WHERE id = $1 AND status = 'active'", []any{int64(4)}, tag("UPDATE 1"), []int64{4}, false},
		{"the transfer's record holds both accounts' keys", bank.InsertTransferSQL, []any{int64(3), int64(8), int64(100), "i"}, ids(int64(77)), []int64{3, 8}, false},
		{"a plain read", "SELECT balance_kobo FROM accounts WHERE id = $1::bigint", []any{int64(3)}, ids(), nil, false},
		{"a statement on other tables", "UPDATE idempotency_keys SET status = 'completed' WHERE key = $1", []any{"k"}, tag("UPDATE 1"), nil, false},
		{"an UPDATE of accounts by another column", "UPDATE accounts SET status = 'closed' WHERE owner_id = $1", []any{int64(3)}, tag("UPDATE 2"), nil, true},
		{"emptying the bank", "DELETE FROM idempotency_keys; DELETE FROM transfers; DELETE FROM accounts", nil, tag("DELETE 5"), nil, true},
		{"a read that locks", "SELECT * FROM accounts FOR SHARE", nil, ids(), nil, true},
	} {
		got, opaque := rowsLocked(tc.sql, tc.args, tc.res)
		if opaque != tc.opaque || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v opaque %v, want %v opaque %v", tc.name, got, opaque, tc.want, tc.opaque)
		}
	}
}

// When the model says a SELECT … FOR UPDATE waits, and for whom: only when
// it is sure, and for the holder of the first row it would wait for.
func TestPredictWait(t *testing.T) {
	t.Parallel()
	type conn struct {
		rows   []int64
		opaque bool
		busy   bool
		timed  bool
	}
	for _, tc := range []struct {
		name    string
		others  map[uint32]conn // pid: what another parked task's transaction holds
		own     conn
		ids     []int64
		off     bool
		blocked []uint32
	}{
		{"nothing held", map[uint32]conn{20: {}}, conn{}, []int64{3, 8}, false, nil},
		{"the second row held", map[uint32]conn{20: {rows: []int64{8}}}, conn{}, []int64{3, 8}, false, []uint32{20}},
		{"both rows held by two others: the first row's holder", map[uint32]conn{20: {rows: []int64{8}}, 30: {rows: []int64{3}}}, conn{}, []int64{3, 8}, false, []uint32{30}},
		{"the first row held by two: PostgreSQL is asked", map[uint32]conn{20: {rows: []int64{3}}, 30: {rows: []int64{3}}}, conn{}, []int64{3, 8}, false, nil},
		{"its own rows", map[uint32]conn{20: {}}, conn{rows: []int64{3, 8}}, []int64{3, 8}, false, nil},
		{"another transaction is opaque", map[uint32]conn{20: {rows: []int64{8}}, 30: {opaque: true}}, conn{}, []int64{3, 8}, false, nil},
		{"the holder's statement is in flight", map[uint32]conn{20: {rows: []int64{8}, busy: true}}, conn{}, []int64{3, 8}, false, nil},
		{"under lock_timeout", map[uint32]conn{20: {rows: []int64{8}}}, conn{timed: true}, []int64{3, 8}, false, nil},
		{"the model turned off", map[uint32]conn{20: {rows: []int64{8}}}, conn{}, []int64{3, 8}, true, nil},
	} {
		s := newSched(1, nil, nil, nil)
		s.noLockModel = tc.off
		set := func(pid uint32, name string, c conn) *task {
			t := s.newTaskLocked(name)
			t.state = taskReady
			s.register(pid, t)
			dc := s.conns[pid]
			dc.opaque, dc.busy, dc.timed = c.opaque, c.busy, c.timed
			for _, id := range c.rows {
				if dc.rows == nil {
					dc.rows = map[int64]bool{}
				}
				dc.rows[id] = true
			}
			return t
		}
		me := set(10, "me", tc.own)
		me.state = taskRunning
		s.running = me
		for pid, c := range tc.others {
			set(pid, "other", c)
		}
		got := s.predictWait(me, 10, tc.ids)
		if !slices.Equal(got, tc.blocked) {
			t.Errorf("%s: predicted %v, want %v", tc.name, got, tc.blocked)
		}
		if want := int64(0); tc.blocked != nil {
			want = 1
			if s.predicted.Load() != want {
				t.Errorf("%s: %d predictions counted, want %d", tc.name, s.predicted.Load(), want)
			}
		} else if s.predicted.Load() != want {
			t.Errorf("%s: %d predictions counted, want none", tc.name, s.predicted.Load())
		}
	}
}
