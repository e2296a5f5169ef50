package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// DemoTokens are the bearer tokens of the lesson's three users, standing in
// for a session store: token-ada is user 1 (account 1), token-bola user 2,
// token-chidi user 3. A fresh map each call, so no caller can change another's.
func DemoTokens() map[string]int64 {
	return map[string]int64{"token-ada": 1, "token-bola": 2, "token-chidi": 3}
}

// tokens checks bearer tokens in constant time.
type tokens struct {
	digests [][sha256.Size]byte
	users   []int64
}

func newTokens(m map[string]int64) *tokens {
	t := &tokens{}
	for tok, user := range m {
		t.digests = append(t.digests, sha256.Sum256([]byte(tok)))
		t.users = append(t.users, user)
	}
	return t
}

// user returns the user whose token the request carries. Both sides are
// hashed first so that every comparison is between 32 bytes, and every token
// is compared, matched or not: the time taken says nothing about how much of
// a guess was right, nor which token it was close to.
func (t *tokens) user(r *http.Request) (int64, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return 0, false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	var user int64
	found := 0
	for i, d := range t.digests {
		eq := subtle.ConstantTimeCompare(got[:], d[:])
		user = int64(subtle.ConstantTimeSelect(eq, int(t.users[i]), int(user)))
		found |= eq
	}
	return user, found == 1
}
