package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Locks is the lock service outside the database, in process: the article's
// Redis, with SET key token NX PX ttl to acquire and a compare-and-delete
// script to release. Its clock is given (a scenario's simulated clock), so
// that a lock can expire while its holder is paused.
//
// Locks also keeps the simulator's record of every grant, which the lock
// service itself does not need: a grant is valid until it expires or its
// holder releases it, and a new grant while another is still valid means two
// holders at once (Check).
type Locks struct {
	// RoundTrip, when set, is the wire between a caller and the lock
	// service, run between two commands of one acquisition that the code
	// sends apart (LockGetThenSet's GET and SET): another caller's
	// commands may come in between. A chaos run makes it a pause, or a
	// step of its scheduler. SET NX is one command and never calls it.
	RoundTrip func(ctx context.Context)

	mu      sync.Mutex
	now     func() time.Time
	entries map[string]lockEntry
	grants  []Grant
	stats   LockStats
}

// LockStats counts the lock's defences at work.
type LockStats struct {
	// TakenAfterExpiry: a lock granted over an expired one whose holder had
	// not released it (the holder stalled or died).
	TakenAfterExpiry int `json:"takenAfterExpiry"`
	// ReleaseRefused: a compare-and-delete that found the key no longer
	// its caller's, and deleted nothing.
	ReleaseRefused int `json:"releaseRefused"`
}

type lockEntry struct {
	token   string
	expires time.Time
}

// Grant is one successful acquisition, as the simulator records it.
type Grant struct {
	Key     string    `json:"key"`
	Token   string    `json:"token"`
	At      time.Time `json:"at"`
	Expires time.Time `json:"expires"`
	// Released is set when its holder released it.
	Released bool `json:"released"`
	// Overlapped names the grant that was still valid when this one was
	// made, if any: two holders at once.
	Overlapped string `json:"overlapped,omitempty"`
}

// NewLocks returns an empty lock service on clock now.
func NewLocks(now func() time.Time) *Locks {
	return &Locks{now: now, entries: map[string]lockEntry{}}
}

// Lock is a held lock: its key and the random token only its holder knows.
type Lock struct {
	Key, Token string
}

// SetNX is SET key token NX PX ttl: it sets key to token unless key holds an
// unexpired value, and reports whether it did.
func (l *Locks) SetNX(key, token string, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e, ok := l.entries[key]; ok && now.Before(e.expires) {
		return false
	}
	l.setLocked(key, token, ttl, now)
	return true
}

// Set is SET key token PX ttl, without NX: it sets key to token whoever
// holds it.
func (l *Locks) Set(key, token string, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(key, token, ttl, l.now())
}

// setLocked sets key to token and records the grant: over a valid grant of
// another, as two holders at once.
func (l *Locks) setLocked(key, token string, ttl time.Duration, now time.Time) {
	if e, ok := l.entries[key]; ok && !now.Before(e.expires) {
		l.stats.TakenAfterExpiry++
	}
	g := Grant{Key: key, Token: token, At: now, Expires: now.Add(ttl)}
	for _, old := range l.grants {
		if old.Key == key && !old.Released && now.Before(old.Expires) {
			g.Overlapped = old.Token
		}
	}
	l.entries[key] = lockEntry{token: token, expires: g.Expires}
	l.grants = append(l.grants, g)
}

// Get is GET key: the token that holds it, "" when none does (or its
// expiry has passed).
func (l *Locks) Get(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[key]; ok && l.now().Before(e.expires) {
		return e.token
	}
	return ""
}

// CompareAndDelete is the article's release script: delete key only if it
// still holds token. It reports whether it deleted.
func (l *Locks) CompareAndDelete(key, token string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	if !ok || e.token != token || !l.now().Before(e.expires) {
		l.stats.ReleaseRefused++
		return false
	}
	delete(l.entries, key)
	l.released(key, token)
	return true
}

// Del is DEL key: whoever holds it.
func (l *Locks) Del(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// released marks token's grant of key released by its holder.
func (l *Locks) released(key, token string) {
	for i := range l.grants {
		if l.grants[i].Key == key && l.grants[i].Token == token {
			l.grants[i].Released = true
		}
	}
}

// Acquire takes key for ttl with token, the holder's own random value.
func (l *Locks) Acquire(key, token string, ttl time.Duration) (Lock, bool) {
	if !l.SetNX(key, token, ttl) {
		return Lock{}, false
	}
	return Lock{Key: key, Token: token}, true
}

// AcquireWith is Acquire as code with flaws takes the lock: with
// LockGetThenSet, a GET, then a SET if the key was free, two commands with
// the wire (RoundTrip) between them.
func (l *Locks) AcquireWith(ctx context.Context, key, token string, ttl time.Duration, flaws Flaws) (Lock, bool) {
	if !flaws.LockGetThenSet {
		return l.Acquire(key, token, ttl)
	}
	// The mistake: check, then set. Another caller's GET between the two
	// finds the key free too, and both set it.
	if l.Get(key) != "" {
		return Lock{}, false
	}
	if l.RoundTrip != nil {
		l.RoundTrip(ctx)
	}
	l.Set(key, token, ttl)
	return Lock{Key: key, Token: token}, true
}

// Release gives lk up: only if it still holds the key (compare-and-delete),
// so that a holder whose lock expired cannot delete the next holder's. It
// reports whether the key was still lk's.
func (l *Locks) Release(lk Lock, flaws Flaws) bool {
	if flaws.LockReleaseWithoutToken {
		l.Del(lk.Key) // the mistake: whoever holds the key now loses it
		l.mu.Lock()
		l.released(lk.Key, lk.Token)
		l.mu.Unlock()
		return true
	}
	return l.CompareAndDelete(lk.Key, lk.Token)
}

// Stats returns the lock's counters.
func (l *Locks) Stats() LockStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Grants returns every grant, in order.
func (l *Locks) Grants() []Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Grant(nil), l.grants...)
}

// Overlaps describes every grant made while another was still valid.
func (l *Locks) Overlaps() []string {
	var out []string
	for _, g := range l.Grants() {
		if g.Overlapped != "" {
			out = append(out, fmt.Sprintf("%s granted to %s while %s still held it", g.Key, g.Token, g.Overlapped))
		}
	}
	return out
}
