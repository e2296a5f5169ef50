package chaos

import (
	"context"
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/probe/judge"
)

// Evidence a target run reads from the answers themselves, header or not:
// what the proxy saw of an answer it dropped, which answers were replays (the
// same transfer id again for the same key), and which refusals of a reused
// key the judge could not name.

// Lost is an answer the target sent that never reached its client (the
// lose-response fault): the proxy in front of the target read it, then
// dropped the connection.
type Lost struct {
	Status int   `json:"status"`
	Body   Bytes `json:"body,omitempty"`
}

// lostAnswer is lose-response in front of a target: as faults.Tunnel, but
// what the target answered is kept for the attempt (rig.lost), since only
// it shows that a later answer with the same transfer is a replay.
type lostAnswer struct {
	rig *httpRig
	at  string // "intent/attempt"
}

func (*lostAnswer) Name() string { return "tunnel" }

func (f *lostAnswer) Exchange(ctx context.Context, _ *faults.Env, x *faults.Exchange) error {
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	f.rig.lost.Store(f.at, &Lost{Status: res.StatusCode, Body: Bytes(body)})
	x.Note("the server answered %d; the connection dropped before it reached the client", res.StatusCode)
	return x.Drop()
}

// keepLost moves what the proxy saw of attempt n of intent i, if it dropped
// the answer, into the history's attempt.
func (r *httpRig) keepLost(at *Attempt, i, n int) {
	if v, ok := r.lost.LoadAndDelete(fmt.Sprintf("%d/%d", i, n)); ok {
		at.Lost = v.(*Lost)
	}
}

// toldID is the transfer id attempt a stands for: the one in the answer
// the client never got, else the one its success told.
func (t *Target) toldID(a Attempt) string {
	if id := t.lostID(a); id != "" || a.Seen != SeenOK {
		return id
	}
	return t.answer(a).TransferID
}

// lostID is the transfer id of the answer the client never got, if any.
func (t *Target) lostID(a Attempt) string {
	if a.Lost == nil {
		return ""
	}
	ans := t.Contract.Read(a.Lost.Status, nil, a.Lost.Body)
	if !ans.Receipt() {
		return ""
	}
	return ans.TransferID
}

// replays marks, for each attempt of in, whether its answer was a replay:
// the same transfer id as an earlier answer to the same key (one its
// client got, or one the proxy dropped), or marked as one by the target's
// header. A target need not send the header for its replays to count.
func (t *Target) replays(in *Intent) []bool {
	out := make([]bool, len(in.Attempts))
	seen := map[string]bool{}
	for k, a := range in.Attempts {
		if a.Lookup {
			continue
		}
		id := t.toldID(a)
		if id == "" {
			continue
		}
		out[k] = seen[id] || a.Replayed && a.Seen == SeenOK
		seen[id] = true
	}
	return out
}

// replayedAcrossRestart reports whether in was told a transfer before a
// restart of the target and the same transfer when its key was sent after
// the restart.
func (t *Target) replayedAcrossRestart(h *History, in *Intent) bool {
	for _, r := range h.Restarts {
		if r.Error != "" {
			continue
		}
		before := ""
		for _, a := range in.Attempts {
			id := t.toldID(a)
			switch {
			case id == "":
			case a.EndNs <= r.AtNs && before == "":
				before = id
			case a.StartNs >= r.EndNs && id == before:
				return true
			}
		}
	}
	return false
}

// unrecognised names the refusals of reused keys the judge could not take
// for refusals of the key, grouped by status and code, with the flag that
// would name them: the reuse was refused and nothing moved, but the run
// cannot say the key was checked rather than, say, the amount.
func (t *Target) unrecognised(h *History) []string {
	type refusal struct {
		status int
		code   string
	}
	count := map[refusal]int{}
	var order []refusal
	for _, in := range h.Intents {
		if in.Reuse == "" || in.Reuse == ReuseUser {
			continue // a user's own; another user's copy is refused the account, not the key
		}
		for _, a := range in.Attempts {
			ans := t.answer(a)
			if a.Seen != SeenRejected || ans.Class == judge.KeyRefusal {
				continue
			}
			r := refusal{a.Status, ans.Code}
			if count[r] == 0 {
				order = append(order, r)
			}
			count[r]++
		}
	}
	var out []string
	for _, r := range order {
		out = append(out, fmt.Sprintf("%d reuse(s) of a key for another request were refused %s: %s",
			count[r], strings.TrimSpace(fmt.Sprintf("%d %s", r.status, r.code)), t.Contract.Judge().Unrecognised(r.status, r.code)))
	}
	return out
}
