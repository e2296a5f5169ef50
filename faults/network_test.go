package faults_test

import (
	"context"
	"errors"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// server counts the requests that reached it and answers 201.
type server struct{ reached int }

func (s *server) handle(context.Context, idem.Request) (bank.Response, error) {
	s.reached++
	return bank.Created(bank.Receipt{TransferID: int64(s.reached)}), nil
}

func send(n *faults.Network, attempt int) error {
	_, err := n.Send(context.Background(), faults.Delivery{Attempt: attempt})
	return err
}

// A live experiment's override replaces the story's rule for the same
// fault, and adds a fault the story does not use.
func TestOverrideReplacesTheStorysRuleOfTheSameFault(t *testing.T) {
	s := &server{}
	n := faults.NewNetwork(s.handle, 1, nil).On(&faults.LoseResponse{}, 1)
	n.Override(faults.Rule{Fault: &faults.LoseResponse{}, Attempts: []int{2}})
	if err := send(n, 1); err != nil {
		t.Errorf("attempt 1: the story's lose-response@1 fired despite the override: %v", err)
	}
	if err := send(n, 2); !errors.Is(err, faults.ErrNoResponse) {
		t.Errorf("attempt 2: the override lose-response@2 did not fire: %v", err)
	}
	if got := n.Fired()["lose-response"]; got != 1 {
		t.Errorf("fired %d times, want 1", got)
	}

	s2 := &server{}
	m := faults.NewNetwork(s2.handle, 1, nil).On(&faults.LoseResponse{}, 1)
	m.Override(faults.Rule{Fault: &faults.DropRequest{}, Attempts: []int{2}})
	if err := send(m, 1); !errors.Is(err, faults.ErrNoResponse) {
		t.Errorf("attempt 1: the story's own fault should still fire when another is added: %v", err)
	}
	if err := send(m, 2); !errors.Is(err, faults.ErrNoResponse) || s2.reached != 1 {
		t.Errorf("attempt 2: drop-request should keep the request from the server (reached %d): %v", s2.reached, err)
	}
}

// committer is a server that commits like the idempotent handler does: it
// runs the AfterCommit hook once its transaction has committed, then does
// what it meant to do after the commit (sends an SMS, say) and answers.
type committer struct{ committed, after int }

func (s *committer) handle(ctx context.Context, _ idem.Request) (bank.Response, error) {
	s.committed++
	if hook := idem.HooksFrom(ctx).AfterCommit; hook != nil {
		hook(ctx)
	}
	s.after++
	return bank.Created(bank.Receipt{TransferID: int64(s.committed)}), nil
}

// crash-after-commit lets the server commit, then kills it on the spot:
// nothing it meant to do after the commit happens, the client sees no
// answer, and the strike is reported on the server's lane. A request that
// commits nothing (a replay, a refusal) is not crashed.
func TestCrashAfterCommitCommitsAndSaysNothing(t *testing.T) {
	s := &committer{}
	n := faults.NewNetwork(s.handle, 1, nil).On(&faults.CrashAfterCommit{}, 1)
	var strikes []faults.Strike
	n.Env.Struck = func(st faults.Strike) { strikes = append(strikes, st) }
	resp, err := n.Send(context.Background(), faults.Delivery{Attempt: 1})
	if !errors.Is(err, faults.ErrNoResponse) || resp.Status != 0 {
		t.Fatalf("the client should see no answer: %v %v", resp, err)
	}
	if s.committed != 1 || s.after != 0 {
		t.Fatalf("the server should have committed once and done nothing after (committed %d, after %d)", s.committed, s.after)
	}
	if len(strikes) != 1 || strikes[0].Fault != "crash-after-commit" || strikes[0].Lane != faults.LaneServer {
		t.Fatalf("strikes %+v, want one crash-after-commit on the server's lane", strikes)
	}
	plain := &server{}
	m := faults.NewNetwork(plain.handle, 1, nil).On(&faults.CrashAfterCommit{}, 1)
	if resp, err := m.Send(context.Background(), faults.Delivery{Attempt: 1}); err != nil || resp.Status != 201 {
		t.Fatalf("a request that commits nothing must be answered, not crashed: %v %v", resp, err)
	}
	if _, err := faults.New("crash-after-commit"); err != nil {
		t.Fatalf("not registered by name: %v", err)
	}
}
