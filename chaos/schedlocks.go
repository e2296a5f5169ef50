package chaos

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The scheduler's model of the account rows each open transaction has
// locked.
//
// Most of the statements a deterministic run cancels for a lock are one:
// "lock both accounts" (SELECT … FOR UPDATE), sent while another parked
// task's transaction holds one of the rows. Sending it costs a round trip,
// a question to PostgreSQL, a cancel and a ROLLBACK TO SAVEPOINT — more
// than a millisecond, a third of a run's time — only to learn what the
// scheduler can know beforehand: which transactions hold which account rows.
// So schedDB notes the account rows each transaction has locked (from the
// statements it sent and their answers), and a SELECT … FOR UPDATE of
// accounts that would wait for one of them is not sent: its task waits for
// the holder's transaction as it would have after the cancel. The run
// makes the same choices, and its history is the same, byte for byte.
//
// The model is trusted only where it is sure. It says "this statement
// waits" only when the first row it would wait for (rows are locked in id
// order) is held by exactly one other transaction, every row before it is
// known to be free, and no open transaction has sent a statement on accounts
// that the model cannot read (it is then opaque, and nothing is
// predicted). Everywhere else the statement is sent, and watched as
// before: a wait the model missed is still seen by asking PostgreSQL.

// rowLocksFor reports the account ids sql locks FOR UPDATE, in the order
// PostgreSQL locks them (by id), when sql is a statement the model
// predicts for: a SELECT of accounts by id (WHERE id = $n, or id IN ($n,
// $m)) FOR UPDATE, which waits for any lock another transaction holds on
// one of its rows. ok is false for any other statement.
func rowLocksFor(sql string, args []any) (ids []int64, ok bool) {
	if !strings.Contains(sql, "accounts") {
		return nil, false // most statements: before normalSQL's copy
	}
	q := normalSQL(sql)
	if !strings.HasPrefix(q, "SELECT ") || !strings.HasSuffix(q, " FOR UPDATE") ||
		strings.Count(q, " FROM ") != 1 || !strings.Contains(q, " FROM accounts WHERE ") {
		return nil, false
	}
	where := q[strings.Index(q, " WHERE ")+len(" WHERE "):]
	where = strings.TrimSuffix(where, " FOR UPDATE")
	where = strings.TrimSuffix(where, " ORDER BY id")
	if m := idEquals.FindStringSubmatch(where); m != nil && m[0] == where {
		if id, ok := argID(args, m[1]); ok {
			return []int64{id}, true
		}
		return nil, false
	}
	if m := idIn.FindStringSubmatch(where); m != nil && m[0] == where {
		a, okA := argID(args, m[1])
		b, okB := argID(args, m[2])
		if !okA || !okB {
			return nil, false
		}
		if a == b {
			return []int64{a}, true
		}
		ids = []int64{a, b}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		return ids, true
	}
	return nil, false
}

var (
	idEquals = regexp.MustCompile(`^id = \$(\d+)(?:::bigint)?$`)
	idIn     = regexp.MustCompile(`^id IN \(\$(\d+)(?:::bigint)?, \$(\d+)(?:::bigint)?\)$`)
	// whereID finds the row an UPDATE of accounts writes.
	whereID = regexp.MustCompile(` WHERE id = \$(\d+)(?:::bigint)?(?: AND [^;]*)?(?: RETURNING [a-z_, ]+)?$`)
	// insertTransfer is the transfer's record: its foreign keys take a
	// KEY SHARE lock on both accounts.
	insertTransfer = regexp.MustCompile(`^INSERT INTO transfers \(from_account, to_account, [a-z_, ]+\) VALUES \(\$1(?:::bigint)?, \$2(?:::bigint)?, `)
)

// normalSQL is sql on one line, single-spaced.
func normalSQL(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// argID is the account id in parameter $n.
func argID(args []any, n string) (int64, bool) {
	i, err := strconv.Atoi(n)
	if err != nil || i < 1 || i > len(args) {
		return 0, false
	}
	switch v := args[i-1].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	}
	return 0, false
}

// rowsLocked reads which account rows a statement that returned without
// error left locked in its transaction: opaque when it touched accounts in
// a way the model does not follow. A statement that locks no account row
// (the keys, the outbox, a plain read) returns nothing.
func rowsLocked(sql string, args []any, res result) (ids []int64, opaque bool) {
	if !strings.Contains(sql, "accounts") && !strings.Contains(sql, "transfers") {
		return nil, false
	}
	q := normalSQL(sql)
	if want, ok := rowLocksFor(sql, args); ok {
		// The rows it read are the rows it locked.
		if res.rows != nil && len(res.rows.fields) > 0 && res.rows.fields[0].Name == "id" {
			for _, r := range res.rows.values {
				id, ok := argID(r[:1], "1")
				if !ok {
					return nil, true
				}
				ids = append(ids, id)
			}
			return ids, false
		}
		switch n := res.tag.RowsAffected(); {
		case res.rows == nil && n == int64(len(want)):
			return want, false
		case res.rows == nil && n == 0:
			return nil, false // no row: none locked
		}
		return nil, true
	}
	switch {
	case strings.HasPrefix(q, "SELECT ") && !strings.Contains(q, " FOR ") && !strings.Contains(q, ";"):
		return nil, false // a plain read locks nothing
	case strings.HasPrefix(q, "UPDATE accounts SET ") && !strings.Contains(q, ";"):
		m := whereID.FindStringSubmatch(q)
		if m == nil {
			return nil, true
		}
		n := res.tag.RowsAffected()
		if res.rows != nil {
			n = res.rows.tag.RowsAffected()
		}
		if n == 0 {
			return nil, false // no row matched: none locked
		}
		id, ok := argID(args, m[1])
		if !ok || n != 1 {
			return nil, true
		}
		return []int64{id}, false
	case insertTransfer.MatchString(q) && !strings.Contains(q, ";"):
		from, okF := argID(args, "1")
		to, okT := argID(args, "2")
		if !okF || !okT {
			return nil, true
		}
		return []int64{from, to}, false
	}
	return nil, true
}

// noteRowLocks records the account rows the statement that t's
// transaction on pid just ran locked (rowsLocked).
func (s *sched) noteRowLocks(pid uint32, sql string, args []any, res result) {
	ids, opaque := rowsLocked(sql, args, res)
	if len(ids) == 0 && !opaque {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[pid]
	if c == nil {
		return
	}
	c.opaque = c.opaque || opaque
	for _, id := range ids {
		if c.rows == nil {
			c.rows = map[int64]bool{}
		}
		c.rows[id] = true
	}
}

// predictWait reports the blockers of a SELECT … FOR UPDATE of ids (in the
// order they are locked) that t is about to send on pid, when the model is
// sure the statement would wait: nil when it would not, or when the model
// cannot tell (see above).
func (s *sched) predictWait(t *task, pid uint32, ids []int64) []uint32 {
	if len(ids) == 0 || s.noLockModel {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	own := s.conns[pid]
	if own == nil || own.timed || own.owner != t {
		return nil // under lock_timeout its statements end by themselves
	}
	for p, c := range s.conns {
		if p != pid && (c.opaque || c.owner == nil) {
			return nil
		}
	}
	for _, id := range ids {
		var holders []uint32
		for p, c := range s.conns {
			if p != pid && c.rows[id] {
				holders = append(holders, p)
			}
		}
		switch {
		case len(holders) == 0:
			continue
		case len(holders) > 1:
			return nil // it would wait for them one at a time: ask PostgreSQL
		}
		c := s.conns[holders[0]]
		if c.owner == t || c.busy {
			return nil // t's own other connection, or a statement in flight: it may end by itself
		}
		s.predicted.Add(1)
		return holders
	}
	return nil
}
