package idem

import (
	"context"
	"sync"

	"github.com/banksim/bank-sim/bank"
)

// MemoryStore is the lesson's mistake "keys in a Map in memory": each server
// process keeps its own map of keys and responses. It behaves correctly for
// one process that never restarts, which is why the mistake survives testing;
// but the map is lost on restart and is not shared between the copies of the
// server behind a load balancer, so a retry that lands on another copy moves
// the money again. It exists to be shown failing (scenario three-servers).
type MemoryStore struct {
	mu   sync.Mutex
	keys map[memoryKey]*memoryEntry
}

type memoryKey struct {
	userID int64
	key    string
}

type memoryEntry struct {
	hash string
	done bool
	resp bank.Response
}

// handleInMemory is Handle with the key store in m instead of PostgreSQL.
// The transfer still runs in a transaction; only the keys are in the wrong
// place.
func (h *Handler) handleInMemory(ctx context.Context, m *MemoryStore, req Request) (bank.Response, error) {
	if !ValidKey(req.Key) {
		return KeyRequired(), nil
	}
	hash := Fingerprint(Method, Path, req.Body)
	k := memoryKey{req.UserID, req.Key}

	m.mu.Lock()
	if m.keys == nil {
		m.keys = map[memoryKey]*memoryEntry{}
	}
	e, seen := m.keys[k]
	if seen {
		m.mu.Unlock()
		switch {
		case e.hash != hash:
			return bank.Reject(422, CodeKeyReused,
				"This Idempotency-Key was sent with a different request; use a new key for a new transfer"), nil
		case !e.done:
			return InProgress(), nil
		}
		resp := e.resp
		resp.Replayed = true
		return resp, nil
	}
	e = &memoryEntry{hash: hash}
	m.keys[k] = e
	m.mu.Unlock()

	// The map's entry is this mistake's claim: a story that holds a request
	// once it has claimed its key holds it here too (double-tap waited 10 s
	// per phase for a claim in PostgreSQL that never came, then could not
	// finish).
	if hook := hooksFrom(ctx).AfterClaim; hook != nil {
		hook(ctx, Claim{Action: Proceed})
	}
	resp, err := h.transfer(ctx, req, nil)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.keys, k)
		return bank.Response{}, err
	}
	e.done, e.resp = true, resp
	return resp, nil
}
