package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

var checkReplay = Check{
	Name:  "replay",
	Title: "a retry with the same key, after the answer arrived, is the same transfer",
	Proves: "the server recognises a retry by its key, also with the body's members written in another order, and answers with the first transfer instead of making another; " +
		"with --exact-replays, also that every replay is the first answer byte for byte",
	Moves: func(c *Config) string { return "one transfer of " + Kobo(c.Amount+1) },
	Run: func(ctx context.Context, c *checkRun) {
		in := c.intent("tap", c.cfg.Payer, c.pay(c.amount()))
		first := c.first(ctx, in, sendOpts{})
		if first == nil {
			return
		}
		c.saw(c.send(ctx, in, sendOpts{}))
		c.same(in, c.settled(ctx, in, 0), first, "the retry with the same key and body")

		c.saw(c.send(ctx, in, sendOpts{reordered: true}))
		c.same(in, c.settled(ctx, in, 0), first, "the retry with the same key and the members in another order")

		if c.caps.Lookup {
			la := c.lookup(ctx, in)
			switch {
			case la == nil:
				c.evidence("GET %s → no answer", c.lookupPath(in))
			case la.TransferID == first.TransferID:
				c.okf("GET %s → %s: the key resolves to the same transfer", c.lookupPath(in), la)
			default:
				c.failf("GET %s → %s, not transfer %s: the key's recorded outcome is not what the client was told", c.lookupPath(in), la, first.TransferID)
			}
		}
	},
}

var checkLostResponse = Check{
	Name:   "lost-response",
	Title:  "the bus goes into a tunnel: a request lost on the way, an answer lost on the way back; the app retries with the same key",
	Proves: "after a network failure the client cannot tell apart, a retry with the same key makes the transfer that never arrived and replays the one that did: each intent moves the money exactly once",
	Moves:  func(c *Config) string { return "two transfers of " + Kobo(c.Amount+2) },
	Run: func(ctx context.Context, c *checkRun) {
		// The request never reaches the server: the retry must do the work.
		lost := c.intent("request lost", c.cfg.Payer, c.pay(c.amount()))
		reset, err := newReset()
		if err != nil {
			c.failf("%v", err)
			return
		}
		a := c.send(ctx, lost, sendOpts{fault: reset, via: "proxy resets the connection before the request reaches the server"})
		c.saw(a)
		if a.Answer != nil {
			c.failf("the proxy's reset did not happen: the client got %s", a.Answer)
			return
		}
		if first := c.settled(ctx, lost, 0); first != nil {
			if first.Receipt() {
				c.debit(receipt{lost, first})
				c.acknowledged(lost)
				c.okf("the retry made the transfer that never arrived: %s", first.TransferID)
			} else {
				c.failf("the retry of a request that never arrived was answered %s, not a transfer", first)
			}
		}

		// The answer is lost on its way back: the retry must replay it.
		gone := c.intent("answer lost", c.cfg.Payer, c.pay(c.amount()))
		f := newLoseAnswer(c.cfg.Contract)
		a = c.send(ctx, gone, sendOpts{fault: f, via: "proxy drops the answer"})
		saw, err := waitSaw(f.saw, c.cfg.Timeout+c.cfg.Settle)
		if err == nil {
			a.Proxy = saw.describe()
		}
		c.saw(a)
		switch {
		case err != nil:
			c.failf("%v", err)
			return
		case saw.answer == nil:
			c.failf("the server did not answer the first attempt: %s", saw.describe())
			return
		case a.Answer != nil:
			c.failf("the answer was not lost: the client got %s", a.Answer)
			return
		case !saw.answer.Receipt():
			c.failf("the server answered the first attempt %s, not a transfer", saw.answer)
			return
		}
		c.debit(receipt{gone, saw.answer})
		c.acknowledged(gone)
		c.same(gone, c.settled(ctx, gone, 0), saw.answer, "the retry after the lost answer")
		if c.caps.Lookup {
			if la := c.lookup(ctx, gone); la != nil {
				c.evidence("GET %s → %s", c.lookupPath(gone), la)
				if la.TransferID != saw.answer.TransferID {
					c.failf("the key's lookup names %q, not the transfer %s the server made", la.TransferID, saw.answer.TransferID)
				}
			}
		}
	},
}

var checkOtherCopy = Check{
	Name:   "other-copy",
	Title:  "the retry after a lost answer lands on another copy of the server",
	Proves: "the copies share their keys (in the database, not in each process's memory): a retry that a load balancer sends elsewhere is still recognised",
	Moves:  func(c *Config) string { return "one transfer of " + Kobo(c.Amount+3) + " (with two or more URLs)" },
	Run: func(ctx context.Context, c *checkRun) {
		if len(c.eps) < 2 {
			c.skip("only one URL was given; give the URLs of two copies of the service (sharing one database) to check that a retry landing on another copy is recognised")
			return
		}
		in := c.intent("answer lost on copy 1", c.cfg.Payer, c.pay(c.amount()))
		f := newLoseAnswer(c.cfg.Contract)
		a := c.send(ctx, in, sendOpts{copy: 0, fault: f, via: "proxy drops the answer"})
		saw, err := waitSaw(f.saw, c.cfg.Timeout+c.cfg.Settle)
		if err == nil {
			a.Proxy = saw.describe()
		}
		c.saw(a)
		if err != nil || saw.answer == nil || !saw.answer.Receipt() {
			c.failf("copy 1 did not make the transfer: %s", saw.describe())
			return
		}
		c.debit(receipt{in, saw.answer})
		c.acknowledged(in)
		for copy := 1; copy < len(c.eps); copy++ {
			c.saw(c.send(ctx, in, sendOpts{copy: copy}))
			c.same(in, c.settled(ctx, in, copy), saw.answer, fmt.Sprintf("the retry on copy %d", copy+1))
		}
	},
}

// sameBytes compares a replay's body with the first answer's, byte for
// byte. Equal is said as evidence. A difference fails the check when the
// target promises exact replays (Contract.ExactReplays), and is otherwise a
// warning: the same transfer, told in other bytes, misleads no JSON client,
// but breaks a signature over the body and any client that compares bytes.
func (c *checkRun) sameBytes(a, first *Answer, what string) {
	if bytes.Equal(a.Body, first.Body) {
		c.okf("%s is the first answer byte for byte (%d bytes)", what, len(a.Body))
		return
	}
	msg := fmt.Sprintf("%s is not the first answer byte for byte: %s", what, bodyDiff(first.Body, a.Body))
	if c.cfg.Contract.ExactReplays {
		c.failf("%s; the target promises exact replays (--exact-replays), and a client that verifies a signature over the body, or compares it, rejects this one", msg)
		return
	}
	c.evidence("⚠ %s. Harmless to a JSON client, which must not depend on the members' order; wrong if the body is signed or compared as bytes (give --exact-replays if the target promises byte-for-byte replays)", msg)
}

// bodyDiff says how replay differs from first: in its bytes only (the same
// JSON value, its members reordered or spaced differently), or in its value
// (which top-level members differ).
func bodyDiff(first, replay []byte) string {
	both := fmt.Sprintf("first %s (%d bytes), replay %s (%d bytes)", snippet(first), len(first), snippet(replay), len(replay))
	var f, r any
	if decode(first, &f) != nil || decode(replay, &r) != nil {
		return both
	}
	if reflect.DeepEqual(f, r) {
		return "the same JSON value in other bytes (its members reordered or spaced differently): " + both
	}
	fo, ok1 := f.(map[string]any)
	ro, ok2 := r.(map[string]any)
	if !ok1 || !ok2 {
		return "another JSON value: " + both
	}
	var differ []string
	for _, k := range sortedNames(fo) {
		if v, ok := ro[k]; !ok || !reflect.DeepEqual(v, fo[k]) {
			differ = append(differ, k)
		}
	}
	for _, k := range sortedNames(ro) {
		if _, ok := fo[k]; !ok {
			differ = append(differ, k)
		}
	}
	return fmt.Sprintf("another JSON value, members %s differ: %s", strings.Join(differ, ", "), both)
}

// decode reads one JSON document, numbers kept as written.
func decode(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
