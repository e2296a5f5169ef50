package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// Error codes of the idempotency layer.
const (
	CodeKeyRequired = "idempotency_key_required"
	CodeKeyReused   = "idempotency_key_reused"
	CodeInProgress  = "request_in_progress"
	CodeInternal    = "internal_error"
)

// InProgress is the 409 answer for a key whose holder is still working.
func InProgress() bank.Response {
	return bank.Reject(409, CodeInProgress, "This request is still being processed; retry shortly")
}

// KeyRequired is the 400 answer for a missing or malformed key.
func KeyRequired() bank.Response {
	return bank.Reject(400, CodeKeyRequired, "Send an Idempotency-Key header of 16 to 64 letters, digits, - or _")
}

// ServerError is the 500 answer to an unexpected failure. A correct handler
// never stores it: it says nothing about whether the transfer happened.
func ServerError() bank.Response {
	return bank.Reject(500, CodeInternal, "Something went wrong on our side; retry with the same Idempotency-Key")
}

// Request is one delivery of POST /transfers as the handler sees it. UserID
// comes from authentication, never from the body.
type Request struct {
	UserID int64
	Key    string // "" when the client sent none
	Body   []byte
}

// Method and path of the transfer endpoint; both are part of the fingerprint.
const (
	Method = "POST"
	Path   = "/transfers"
)

// ConflictPolicy is what a request does when it finds its key in progress.
type ConflictPolicy int

const (
	// Reject409 answers 409 request_in_progress at once (the lesson's way).
	Reject409 ConflictPolicy = iota
	// WaitForResult polls the key until it completes, then replays it, and
	// answers 409 only when the wait runs out.
	WaitForResult
)

// Hooks are points where a fault can stop a request, set per request on its
// context by the fault-injecting network.
type Hooks struct {
	// BeforeClaim runs just before the claim's INSERT is sent.
	BeforeClaim func(ctx context.Context)
	// ClaimCommitted runs when the claim's INSERT has committed, before its
	// answer is used; ctx is the context the claim ran on. An error here is
	// what the caller hears instead of the answer, as when the context ends
	// while the answer is on its way back: PostgreSQL has committed the
	// claim, and pgx reports the cancellation.
	ClaimCommitted func(ctx context.Context) error
	// AfterClaim runs after the key is claimed and before the transaction:
	// a server that goes silent here has left its key in progress.
	AfterClaim func(ctx context.Context, c Claim)
	// BeforeCommit runs inside the transaction after the work and the
	// stored response, just before COMMIT. An error here rolls it all back.
	BeforeCommit func(ctx context.Context) error
	// AfterCommit runs once the transfer's transaction has committed, before
	// anything else the server does after it (its after-commit side
	// effects, its answer): a server that dies here has moved the money
	// and done nothing more.
	AfterCommit func(ctx context.Context)
	// Waited runs when a request that found its key in progress has waited
	// for it under WaitForResult, with the claim the wait ended with. It
	// only observes: chaos counts the wait policy's path with it.
	Waited func(ctx context.Context, c Claim)
	// Pause, when set, takes the place of the wait policy's real pauses
	// between two polls of the key, and the wait is then measured in
	// pauses (WaitTimeout/WaitInterval of them) instead of real time: a
	// simulator that schedules every step makes the wait last the same
	// number of polls on every run. An error ends the wait.
	Pause func(ctx context.Context, d time.Duration) error
}

// Effects is what a successful transfer causes beyond its own rows (an SMS,
// an event for other services). The handler knows no more of them than
// this: InTx runs in the transfer's transaction, after the transfer and
// before its key is completed, and an error rolls the transfer back;
// AfterCommit runs after the commit and cannot undo it. A replay runs
// neither: the first answer's transaction did. The outbox package's Effects
// is the implementation.
type Effects interface {
	InTx(ctx context.Context, tx pgx.Tx, userID int64, rc bank.Receipt) error
	AfterCommit(ctx context.Context, userID int64, rc bank.Receipt)
}

// RefusalEffects, when Effects has it, is told about every request the
// transfer's checks refused, in the transaction that stores the refusal
// with its key: tx returns it, and a pipelined transfer pays the round
// trip that flushes its queue only when tx is called. The correct effects
// cause nothing for a refusal and never call it; the outbox's mistake of
// writing the SMS before the checks shows here.
type RefusalEffects interface {
	Refused(ctx context.Context, tx func() (pgx.Tx, error), userID int64, req bank.TransferRequest) error
}

// refused tells the effects, if they listen, about a refused request.
func (h *Handler) refused(ctx context.Context, tx func() (pgx.Tx, error), userID int64, req bank.TransferRequest) error {
	if r, ok := h.Effects.(RefusalEffects); ok {
		if err := r.Refused(ctx, tx, userID, req); err != nil {
			return fmt.Errorf("side effects: %w", err)
		}
	}
	return nil
}

type hooksKey struct{}

// WithHooks attaches hooks to a request's context.
func WithHooks(ctx context.Context, h Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// HooksFrom returns the hooks attached to ctx by WithHooks, so that a fault
// can add its own to them instead of replacing them.
func HooksFrom(ctx context.Context) Hooks { return hooksFrom(ctx) }

func hooksFrom(ctx context.Context) Hooks {
	h, _ := ctx.Value(hooksKey{}).(Hooks)
	return h
}

func claimCommitted(ctx context.Context) error {
	if hook := hooksFrom(ctx).ClaimCommitted; hook != nil {
		return hook(ctx)
	}
	return nil
}

// DefaultWorkTimeout bounds a request's database work when Handler.WorkTimeout
// is zero. It is well below DefaultLockTTL, so that a request that gives up
// has time to release its key before its lock could be taken over.
const DefaultWorkTimeout = 20 * time.Second

// releaseTimeout bounds the release of a key after a failure.
const releaseTimeout = 5 * time.Second

// Handler is the transfer endpoint: bank.Transfer behind the key store.
type Handler struct {
	DB    bank.DB
	Store *Store
	// Now is this app server's own clock; time.Now when nil. Lock expiry
	// and key ages run on the database's clock, not on this one; only the
	// AppClock mistake reads it (see Store.Begin).
	Now func() time.Time
	// WorkTimeout bounds a request's database work, from the claim to the
	// commit or the release; DefaultWorkTimeout when zero. Keep it below the
	// lock's TTL.
	WorkTimeout time.Duration
	// Stopping, when set and done, cuts every request's work short: its
	// transaction rolls back, its key is released and Handle returns an
	// error. A server that must stop before its requests finish cancels it,
	// so that it leaves no key in progress behind.
	Stopping context.Context

	// Effects, when set, are told about every successful transfer, inside
	// its transaction and after its commit.
	Effects Effects

	Conflict     ConflictPolicy
	WaitInterval time.Duration // between polls under WaitForResult; 10 ms when zero
	WaitTimeout  time.Duration // total wait under WaitForResult; 2 s when zero

	// Unpipelined sends the transfer's statements one at a time, each after
	// the answer to the one before, as the lesson's code does: correct, but
	// the accounts' rows stay locked for five round trips instead of none.
	// bench measures the two against each other with it.
	Unpipelined bool

	// NoKey turns the handler into the lesson's middle step: every request
	// runs in a transaction, but keys are ignored, so a retry moves money again.
	NoKey bool
	// Bank switches on mistakes inside the transfer itself.
	Bank bank.Flaws
	// Memory, when set, keeps the keys in this process's memory instead of
	// in Store: the lesson's "keys in a Map" mistake (see MemoryStore).
	Memory *MemoryStore
	// SecondTransaction is the lesson's mistake "storing the response in a
	// second transaction": the transfer commits first, and a failure before
	// the second commit leaves a done transfer with no stored response.
	SecondTransaction bool
	// StoreServerErrors is the mistake "replaying stored 500s": after an
	// unexpected failure the key is completed with a 500 instead of being
	// released, so every retry replays the outage.
	StoreServerErrors bool
	// ClaimOnRequestContext is the mistake of running the claim and the
	// transfer on the request's own context: when the client goes away
	// while the claim's INSERT is on its way back, PostgreSQL has committed
	// the claim but the handler hears "context canceled", returns without
	// releasing it, and the key stays in progress with nobody working on
	// it: every retry is told 409 until the lock expires.
	ClaimOnRequestContext bool
	// RefusalInSecondTransaction is the mistake of storing a refusal in a
	// transaction of its own after the request's, on the reasoning that a
	// refusal moved no money, and of answering the refusal even when storing
	// it failed: the key is released as after any failure, and the client
	// holds a final answer its key no longer has.
	RefusalInSecondTransaction bool
	// RefusalErrorAsResponse is the mistake of answering a refused request
	// whose transaction then failed (its COMMIT, say) with a 500 response
	// instead of returning the error: the refusal was decided, so the
	// request looks handled, but Handle releases a key only on an error.
	// The key stays in progress with nobody working on it, and every retry
	// is told 409 until its lock expires.
	RefusalErrorAsResponse bool
}

// workContext is the context a request's database work runs on. Once a
// claim may have committed, the work must finish or release the key, whatever
// the client does: so it is detached from the request's cancellation (a
// client that disconnects or half-closes its connection ends the request's
// context) and bounded by WorkTimeout, and by Stopping.
func (h *Handler) workContext(req context.Context) (context.Context, context.CancelFunc) {
	if h.ClaimOnRequestContext {
		return req, func() {} // the mistake: the client's departure cuts the work off
	}
	timeout := h.WorkTimeout
	if timeout <= 0 {
		timeout = DefaultWorkTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req), timeout)
	if h.Stopping == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(h.Stopping, cancel)
	return ctx, func() { stop(); cancel() }
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Handle answers one request. Refusals, replays, 409s and successes come back
// as a Response; the error is for unexpected failures (a 500 to the client),
// after which the key has been released so that a retry can succeed.
func (h *Handler) Handle(ctx context.Context, req Request) (bank.Response, error) {
	ctx, cancel := h.workContext(ctx)
	defer cancel()
	if h.Bank.OwnFundsReadOnArrival {
		// The mistake's first half: the sender's balance read now, before
		// the key is claimed, is what a move between the customer's own
		// accounts is checked on.
		if parsed, refusal := bank.ParseTransferRequest(req.Body); refusal == nil {
			var err error
			if ctx, err = bank.ReadBalanceOnArrival(ctx, h.DB, parsed.From); err != nil {
				return bank.Response{}, err
			}
		}
	}
	if h.NoKey {
		return h.transfer(ctx, req, nil)
	}
	if h.Memory != nil {
		return h.handleInMemory(ctx, h.Memory, req)
	}
	if !ValidKey(req.Key) {
		return KeyRequired(), nil
	}
	hash := Fingerprint(Method, Path, req.Body)

	claim, err := h.Store.Begin(ctx, h.DB, req.UserID, req.Key, hash, h.now())
	if err != nil {
		return bank.Response{}, err
	}
	if claim.Action == Respond && claim.Response.Status == 409 && h.Conflict == WaitForResult {
		claim, err = h.wait(ctx, req, hash)
		if err != nil {
			return bank.Response{}, err
		}
		if hook := hooksFrom(ctx).Waited; hook != nil {
			hook(ctx, claim)
		}
	}
	if claim.Action != Proceed {
		return claim.Response, nil
	}

	if hook := hooksFrom(ctx).AfterClaim; hook != nil {
		hook(ctx, claim)
	}
	resp, err := h.transfer(ctx, req, &claim)
	if err != nil {
		// The holder's own claim only: after a takeover this deletes nothing.
		// A fresh context, because the work's may be what failed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if h.StoreServerErrors {
			if serr := h.Store.Complete(rctx, h.DB, req.UserID, req.Key, claim.LockID, ServerError()); serr == nil {
				return bank.Response{}, err
			}
		}
		if rerr := h.Store.Release(rctx, h.DB, req.UserID, req.Key, claim.LockID); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return bank.Response{}, err
	}
	return resp, nil
}

// transfer runs the transfer and, when claim is set, stores its response in
// the same transaction.
//
// The correct handler runs it pipelined (transferPipelined): one or two
// round trips instead of one per statement. The lesson's mistakes in the
// transfer itself (Bank) and SecondTransaction are shown on the
// statement-at-a-time transfer below, where each is one branch next to the
// line it corrupts.
func (h *Handler) transfer(ctx context.Context, req Request, claim *Claim) (bank.Response, error) {
	if claim != nil && h.SecondTransaction {
		return h.transferThenStore(ctx, req, *claim)
	}
	if claim != nil && h.RefusalInSecondTransaction {
		return h.refuseThenStore(ctx, req, *claim)
	}
	if claim != nil && h.RefusalErrorAsResponse {
		return h.refuseOrAnswer500(ctx, req, *claim)
	}
	if h.Bank == (bank.Flaws{}) && !h.Unpipelined && bank.CanPipeline(h.DB) {
		return h.transferPipelined(ctx, req, claim)
	}
	var resp bank.Response
	err := bank.InTx(ctx, h.DB, func(tx pgx.Tx) error {
		var err error
		if resp, err = h.work(ctx, tx, req); err != nil {
			return err
		}
		if claim == nil {
			return beforeCommit(ctx)
		}
		return h.complete(ctx, tx, req, *claim, resp)
	})
	if err != nil {
		return bank.Response{}, fmt.Errorf("transfer: %w", err)
	}
	h.afterCommit(ctx, req, resp)
	return resp, nil
}

// transferPipelined is transfer in one or two round trips, with the same
// statements and guarantees as the statement-at-a-time transfer.
//
// In one round trip (bank.TransferOneTrip): BEGIN, the locking read of both
// accounts in id order, the SQL guard that checks every rule on the locked
// rows before any write, the debit, the credit, the INSERT, the key's fenced
// completion with the answer's bytes, and COMMIT, all sent together, so that
// the rows stay locked only while PostgreSQL works. When a rule refuses,
// the guard fails, nothing is written, and the request runs again in two
// round trips, which store the refusal that Go's checks name.
//
// In two round trips (bank.TransferPipelined): the first sends BEGIN and
// locks both accounts; every rule is checked in Go on the locked rows; the
// second sends the writes, the completion and COMMIT. A hook between the
// checks and the writes takes this way from the start. Side effects, either
// way, cost a round trip more: their statements need the transfer's id, so
// the writes are sent first and the completion and COMMIT after them.
//
// Either way, should the key's lock have passed to another request
// meanwhile, the completion fails, the COMMIT behind it is skipped, and the
// whole transaction rolls back, as with Complete. A deadlock or
// serialization failure runs it all again. A BeforeCommit hook needs the
// stored response written and the COMMIT not yet sent, so with one the
// COMMIT goes in a round trip of its own.
func (h *Handler) transferPipelined(ctx context.Context, req Request, claim *Claim) (bank.Response, error) {
	return bank.OneTripFirst(bank.OneTrip(ctx), func(queue bank.QueueTransfer) (bank.Response, error) {
		return h.pipelined(ctx, req, claim, queue)
	})
}

func (h *Handler) pipelined(ctx context.Context, req Request, claim *Claim, queue bank.QueueTransfer) (bank.Response, error) {
	var out *bank.Outcome
	err := bank.Pipelined(ctx, h.DB, func(p *bank.Pipeline) error {
		parsed, refusal := bank.ParseTransferRequest(req.Body)
		if refusal != nil {
			out = bank.Refused(*refusal)
		} else {
			var err error
			if out, err = queue(ctx, p, req.UserID, parsed); err != nil {
				return err
			}
		}
		// The side effects run their statements one at a time in the
		// transfer's transaction, after its writes (whose transfer id they
		// need) and before the key's completion: an extra round trip, only
		// for a handler that has them.
		if out.Status() == 201 && h.Effects != nil {
			tx, err := p.Tx(ctx)
			if err != nil {
				return fmt.Errorf("write: %w", err)
			}
			rc, _ := out.Receipt() // its transfer id is read now
			if err := h.Effects.InTx(ctx, tx, req.UserID, rc); err != nil {
				return fmt.Errorf("side effects: %w", err)
			}
		} else if refusal == nil && h.Effects != nil {
			tx := func() (pgx.Tx, error) {
				tx, err := p.Tx(ctx)
				if err != nil {
					return nil, fmt.Errorf("write: %w", err)
				}
				return tx, nil
			}
			if err := h.refused(ctx, tx, req.UserID, parsed); err != nil {
				return err
			}
		}
		if claim != nil {
			h.Store.QueueComplete(p, req.UserID, req.Key, claim.LockID, out)
		}
		// The round trip of the writes, the stored answer and the COMMIT.
		if hook := hooksFrom(ctx).BeforeCommit; hook != nil {
			if err := p.Flush(ctx); err != nil {
				return failedWrite("write", err)
			}
			if err := hook(ctx); err != nil {
				return err
			}
		}
		if err := p.Commit(ctx); err != nil {
			return failedWrite("write and commit", err)
		}
		return nil
	})
	if err != nil {
		return bank.Response{}, fmt.Errorf("transfer: %w", err)
	}
	resp := out.Response()
	h.afterCommit(ctx, req, resp)
	return resp, nil
}

// failedWrite is the error of a pipelined round trip that carried writes.
// A lost lock is ErrLostLock itself, as Complete returns it on the
// statement-at-a-time path, so both paths say the same thing.
func failedWrite(step string, err error) error {
	if err = lostLock(err); errors.Is(err, ErrLostLock) {
		return err
	}
	return fmt.Errorf("%s: %w", step, err)
}

// afterCommit runs what follows a committed transfer: the AfterCommit hook,
// then the effects' after-commit part.
func (h *Handler) afterCommit(ctx context.Context, req Request, resp bank.Response) {
	if hook := hooksFrom(ctx).AfterCommit; hook != nil {
		hook(ctx)
	}
	rc, ok := resp.Receipt()
	if ok && h.Bank.OwnCreditInSecondTransaction {
		// The mistake: a move between the sender's own accounts is credited
		// now, in a transaction of its own. A credit that fails is lost:
		// the transfer has committed, and its key holds the 201.
		_ = bank.CreditOwnAccount(ctx, h.DB, req.UserID, rc)
	}
	if ok && h.Effects != nil {
		h.Effects.AfterCommit(ctx, req.UserID, rc)
	}
}

// complete stores resp as the key's answer in tx and runs the BeforeCommit
// hook: the last steps before COMMIT.
func (h *Handler) complete(ctx context.Context, tx pgx.Tx, req Request, claim Claim, resp bank.Response) error {
	if err := h.Store.Complete(ctx, tx, req.UserID, req.Key, claim.LockID, resp); err != nil {
		return err
	}
	return beforeCommit(ctx)
}

func beforeCommit(ctx context.Context) error {
	if hook := hooksFrom(ctx).BeforeCommit; hook != nil {
		return hook(ctx)
	}
	return nil
}

// work parses the body and runs the transfer in tx: the part of a request
// that touches money. A body that breaks the input rules is a refusal, not
// an error.
func (h *Handler) work(ctx context.Context, tx pgx.Tx, req Request) (bank.Response, error) {
	parsed, refusal := bank.ParseTransferRequest(req.Body)
	if refusal != nil {
		return *refusal, nil
	}
	resp, err := bank.TransferWith(ctx, tx, req.UserID, parsed, h.Bank)
	if err != nil {
		return resp, err
	}
	if rc, ok := resp.Receipt(); !ok {
		if err := h.refused(ctx, func() (pgx.Tx, error) { return tx, nil }, req.UserID, parsed); err != nil {
			return bank.Response{}, err
		}
	} else {
		if h.Effects != nil {
			if err := h.Effects.InTx(ctx, tx, req.UserID, rc); err != nil {
				return bank.Response{}, fmt.Errorf("side effects: %w", err)
			}
		}
		if h.Bank.ReceiptLastValue {
			// The mistake: the answer's id is read back from the sequence,
			// whose last_value is every session's, not this transfer's.
			if err := tx.QueryRow(ctx, bank.SequenceLastValueSQL).Scan(&rc.TransferID); err != nil {
				return bank.Response{}, fmt.Errorf("read the transfer's id: %w", err)
			}
			resp = bank.Created(rc)
		}
	}
	if h.Bank.ClosedCheckedLast {
		// The mistake: the rule that knows "closed" runs last, after the
		// writes; its refusal commits with them.
		refusal, err := bank.CheckAccountsAfter(ctx, tx, req.UserID, parsed)
		if err != nil {
			return bank.Response{}, err
		}
		if refusal != nil {
			return *refusal, nil
		}
	}
	return resp, nil
}

// wait is the second article's answer to a duplicate in flight: instead of
// 409, poll the key until its holder finishes and replay what it stored.
func (h *Handler) wait(ctx context.Context, req Request, hash string) (Claim, error) {
	interval, timeout := h.WaitInterval, h.WaitTimeout
	if interval <= 0 {
		interval = 10 * time.Millisecond
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	pause := hooksFrom(ctx).Pause
	deadline := time.Now().Add(timeout)
	var waited time.Duration
	for {
		if pause != nil {
			if err := pause(ctx, interval); err != nil {
				return Claim{}, err
			}
		} else {
			select {
			case <-ctx.Done():
				return Claim{}, ctx.Err()
			case <-time.After(interval):
			}
		}
		waited += interval
		claim, err := h.Store.Begin(ctx, h.DB, req.UserID, req.Key, hash, h.now())
		if err != nil {
			return Claim{}, err
		}
		over := time.Now().After(deadline)
		if pause != nil {
			over = waited >= timeout
		}
		if claim.Action != Respond || claim.Response.Status != 409 || over {
			return claim, nil
		}
	}
}
