// Package mistakes is the catalogue of the lesson's built-in mistakes: the
// values of --bug, the rows of the audit, the entries of list --bugs.
//
// A mistake may switch on flaws in the key store and the handler (idem), the
// transfer (bank) and the side effects (outbox), so the catalogue sits above
// all three instead of inside idem: that way the idempotency handler does not
// import the outbox just to name its mistakes.
package mistakes

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

// Bug is one of the lesson's mistakes ("Failure cases and production
// concerns", and the transfer's own pitfalls), switched on in a handler or a
// client that is otherwise correct. The simulator runs with exactly one bug
// to show that its checks catch it.
type Bug struct {
	// Name is the bug's flag value: --bug NAME.
	Name string `json:"name"`
	// Mistake is what the code does wrong, as the lesson's table says it.
	Mistake string `json:"mistake"`
	// Consequence is what the mistake costs, and when it shows.
	Consequence string `json:"consequence"`

	// NewKeyPerAttempt is the client-side mistake: the client makes a new
	// key for every attempt instead of one per intent. Apply ignores it; the
	// client reads it.
	NewKeyPerAttempt bool `json:"newKeyPerAttempt,omitempty"`
	// NewKeyAfterServerError is a narrower client-side mistake: the client
	// keeps its key across retries, but makes a new one after a 5xx
	// answer. Apply ignores it; the client reads it.
	NewKeyAfterServerError bool `json:"newKeyAfterServerError,omitempty"`
	// AsyncReplication is the database's mistake, not the handler's: the
	// primary's standby is replicated asynchronously, so a failover loses
	// what the primary had acknowledged and not yet sent. Apply ignores it;
	// whoever starts the primary and its standby (the failover story,
	// chaos --failover) reads it.
	AsyncReplication bool `json:"asyncReplication,omitempty"`
	// MemoryKeys keeps each server process's keys in its own memory.
	MemoryKeys bool `json:"memoryKeys,omitempty"`
	// SecondTransaction stores the response in a second transaction.
	SecondTransaction bool `json:"secondTransaction,omitempty"`
	// StoreServerErrors stores a 500 as the key's final answer.
	StoreServerErrors bool `json:"storeServerErrors,omitempty"`
	// ClaimOnRequestContext runs the claim and the transfer on the
	// request's context.
	ClaimOnRequestContext bool `json:"claimOnRequestContext,omitempty"`
	// RefusalInSecondTransaction stores a refusal in a second transaction
	// and answers it even when storing it failed.
	RefusalInSecondTransaction bool `json:"refusalInSecondTransaction,omitempty"`
	// RefusalErrorAsResponse answers a refused request whose transaction
	// failed with a 500 response instead of an error, so its key is not
	// released.
	RefusalErrorAsResponse bool `json:"refusalErrorAsResponse,omitempty"`
	// Store switches on mistakes in the key store.
	Store idem.Flaws `json:"store,omitzero"`
	// Bank switches on mistakes in the transfer.
	Bank bank.Flaws `json:"bank,omitzero"`
	// Outbox switches on mistakes in the side effects beyond the database:
	// the transfer's SMS and event, the dispatcher, the consumer, the
	// external lock, mark-shipped. Apply ignores it; whoever builds those
	// parts (outbox.Effects, Dispatcher, Consumer, …) reads it.
	Outbox outbox.Flaws `json:"outbox,omitzero"`
	// API switches on mistakes of the HTTP layer around the handler. Apply
	// ignores it; whoever builds the API server (chaos over HTTP) reads
	// it. No mistake of the catalogue has one: a run in process never
	// meets api/, and the audit's runs are in process.
	API api.Flaws `json:"api,omitzero"`
}

// Apply switches the bug on in h, on top of whatever h already has. It is
// safe to call more than once. Each call with MemoryKeys gives h a map of its
// own only if it has none yet: one map per server process.
func (b Bug) Apply(h *idem.Handler) {
	if h.Store == nil {
		h.Store = &idem.Store{}
	}
	orFlaws(&h.Store.Flaws, b.Store)
	orFlaws(&h.Bank, b.Bank)
	h.SecondTransaction = h.SecondTransaction || b.SecondTransaction
	h.StoreServerErrors = h.StoreServerErrors || b.StoreServerErrors
	h.ClaimOnRequestContext = h.ClaimOnRequestContext || b.ClaimOnRequestContext
	h.RefusalInSecondTransaction = h.RefusalInSecondTransaction || b.RefusalInSecondTransaction
	h.RefusalErrorAsResponse = h.RefusalErrorAsResponse || b.RefusalErrorAsResponse
	if b.MemoryKeys && h.Memory == nil {
		h.Memory = &idem.MemoryStore{}
	}
}

// ApplySchema gives the bank that q reaches the bug's schema, on top of
// the lesson's (bank.Schema): for no-balance-floor, the accounts table
// without its CHECK (balance_kobo >= 0). Whoever opens a bank for a run
// with the bug calls it (a chaos run, a scenario's protected phase,
// serve); a bug with no schema of its own sends nothing. A bank lent by
// banks.Recycled gets the CHECK back when it is reset.
func (b Bug) ApplySchema(ctx context.Context, q bank.Querier) error {
	if b.Bank.NoBalanceFloor {
		if _, err := q.Exec(ctx, bank.DropBalanceFloorSQL); err != nil {
			return fmt.Errorf("%s: drop the balance's CHECK: %w", b.Name, err)
		}
	}
	return nil
}

// orFlaws switches on in dst every flaw src has. A Flaws struct is all
// bools, and a flaw added to it is carried without a line here: a line
// forgotten here made a new mistake silently the correct code.
func orFlaws[T any](dst *T, src T) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src)
	for i := range d.NumField() {
		if s.Field(i).Bool() {
			d.Field(i).SetBool(true)
		}
	}
}

// All returns the catalogue sorted by name, built afresh on every call: the
// listings, the audit's rows and shell completion then come out in one order,
// and a caller may change what it gets without changing anyone else's.
func All() []Bug {
	out := []Bug{
		{
			Name:             "new-key-per-attempt",
			Mistake:          "The client makes a new idempotency key for every attempt instead of one per intent",
			Consequence:      "Every retry looks new to the server: a lost response and its retry move the money twice, exactly as with no keys",
			NewKeyPerAttempt: true,
		},
		{
			Name:                   "new-key-after-5xx",
			Mistake:                "The client keeps its key across retries, but makes a new one after a 5xx answer, as if a server error meant the request had failed whole (its transaction rolled back, or its key spoiled by a stored 500)",
			Consequence:            "A server fails after its request's transfer committed (a holder fenced out once the retry that took its key over has transferred): the new key's request is new to the server, and the money moves twice",
			NewKeyAfterServerError: true,
		},
		{
			Name:             "async-replication",
			Mistake:          "The standby that a failover promotes is replicated asynchronously (PostgreSQL's default): the primary acknowledges a commit before the standby has it",
			Consequence:      "The primary dies before its standby has the last commits: the promoted standby has neither those transfers nor their keys, and a resend with the same key moves the money again",
			AsyncReplication: true,
		},
		{
			Name:        "memory-keys",
			Mistake:     "Keys kept in a map in the server's memory",
			Consequence: "Lost on restart and not shared between the copies of the server behind a load balancer: a retry that lands on another copy moves the money again",
			MemoryKeys:  true,
		},
		{
			Name:              "second-transaction",
			Mistake:           "The response is stored in a second transaction, after the transfer's has committed",
			Consequence:       "A crash between the two commits leaves a done transfer with no stored response; the retry transfers again",
			SecondTransaction: true,
		},
		{
			Name:                       "refusal-in-second-transaction",
			Mistake:                    "A refusal is stored in a transaction of its own after the request's, and answered even when storing it failed",
			Consequence:                "The client holds a final refusal whose key is gone: its retry runs the request again and may move the money it was told did not move",
			RefusalInSecondTransaction: true,
		},
		{
			Name:                   "refusal-failure-as-500-response",
			Mistake:                "A refused request whose transaction then fails is answered with a 500 response instead of returning the error, and keys are released only on an error",
			Consequence:            "The key stays in progress with nobody working on it: every retry of that refusal is told 409 until the lock expires",
			RefusalErrorAsResponse: true,
		},
		{
			Name:        "rebuilt-refusal-replay",
			Mistake:     "A replayed refusal is rebuilt from its stored status and code, with a generic message, instead of the bytes that were sent",
			Consequence: "The same refusal, but not the same answer: a client that compares or verifies a signature sees a different response",
			Store:       idem.Flaws{RebuiltRefusals: true},
		},
		{
			Name:        "unscoped-keys",
			Mistake:     "Keys are not scoped to the user",
			Consequence: "One user who sends another's key is told that user's stored response, and their own transfer never happens",
			Store:       idem.Flaws{Unscoped: true},
		},
		{
			Name:        "no-fingerprint",
			Mistake:     "The request fingerprint is ignored",
			Consequence: "A buggy client reuses a key for a different amount and is told it succeeded",
			Store:       idem.Flaws{NoFingerprint: true},
		},
		{
			Name:              "stored-5xx",
			Mistake:           "An unexpected failure's 500 is stored as the key's answer and replayed",
			Consequence:       "A temporary outage becomes a permanent failure for that key: every retry replays the 500 and the intent never completes",
			StoreServerErrors: true,
		},
		{
			Name:        "no-expiry",
			Mistake:     "The key's lock has no expiry",
			Consequence: "One crash blocks that key forever: the user can never complete that transfer",
			Store:       idem.Flaws{NoExpiry: true},
		},
		{
			Name:        "no-fencing",
			Mistake:     "The lock expires, but completion does not check a fencing token",
			Consequence: "A slow server and the retry that took over its key both commit their transfer",
			Store:       idem.Flaws{NoFencing: true},
		},
		{
			Name:        "read-compare-write",
			Mistake:     "The balance is read in a step of its own, before the row is locked, compared in Go and written back as a number",
			Consequence: "Two concurrent transfers both see the old balance; one debit is overwritten and money appears from nowhere",
			Bank:        bank.Flaws{ReadCompareWrite: true},
		},
		{
			Name:        "no-row-lock",
			Mistake:     "The accounts are read without FOR UPDATE, so the sender's row is not locked while the transfer checks it",
			Consequence: "An account frozen while the transfer is in flight is debited anyway: the check saw it active, and nothing stopped the freeze",
			Bank:        bank.Flaws{NoRowLock: true},
		},
		{
			Name:        "credit-by-customer",
			Mistake:     "The credit goes to the payee's customer, not to the account named: the first account they own (the lowest id), as if paying a customer were paying their main account",
			Consequence: "Where each customer has one account nothing shows; a payment to a customer's other account lands in their first one (frozen or closed, it takes the money all the same): the total is kept and the receipt and the transfer's row name the right account, but two balances are off their ledgers",
			Bank:        bank.Flaws{CreditByCustomer: true},
		},
		{
			Name:        "credit-second-row",
			Mistake:     "The credit goes to the second of the two rows the locking read returned (they come in id order), taken for the recipient",
			Consequence: "A transfer to a lower account number credits its own sender: the recipient never gets the money, though the receipt and the ledger say it did",
			Bank:        bank.Flaws{CreditSecondRow: true},
		},
		{
			Name:        "own-accounts-unchecked",
			Mistake:     "A transfer between two accounts of the same user is debited without the funds condition, as if a move between a customer's own accounts could not overdraw",
			Consequence: "The customer moves more than one account holds to their other account. Where the schema leaves the floor to the code, the first goes below zero and the bank has lent what they then spend from the second; with a CHECK (balance_kobo >= 0), as the lesson's schema has, the debit fails and every attempt is a 500: the move never settles",
			Bank:        bank.Flaws{OwnAccountsUnchecked: true},
		},
		{
			Name:        "own-credit-in-second-transaction",
			Mistake:     "A move between two accounts of one customer commits its debit, its transfer row, its side effects and its answer, and credits the other account afterwards in a transaction of its own, as if money that stays with its customer could not be refused and need not hold the transfer's locks",
			Consequence: "Where each customer has one account nothing shows. Between the two commits the customer's money is in neither account: a snapshot of every balance taken meanwhile is short by the amount, though the final balances add up (and a server that dies between the commits loses the credit)",
			Bank:        bank.Flaws{OwnCreditInSecondTransaction: true},
		},
		{
			Name:        "no-balance-floor",
			Mistake:     "The accounts table has no CHECK (balance_kobo >= 0), leaving the floor to the application, and a move between two accounts of one customer is checked on the balance read as the request arrived, before its key was claimed, then debited without the funds condition",
			Consequence: "Where each customer has one account nothing shows. A debit of the sender that commits between that read and the move's row lock goes unseen: the move overdraws, and with no CHECK to refuse it the account goes below zero (the money stays the customer's: the total and every transfer's row add up)",
			Bank:        bank.Flaws{NoBalanceFloor: true, OwnFundsReadOnArrival: true},
		},
		{
			Name:        "one-lock-per-customer",
			Mistake:     "The transfer locks one row per customer, their first account's (FOR UPDATE), and reads the two accounts without a lock, as if a customer's transfers could only race one another",
			Consequence: "Where each customer has one account it is the sender's row, and a freeze waits; but a transfer from a customer's other account is checked on a row nothing holds: frozen between its checks and its debit, the account is debited anyway",
			Bank:        bank.Flaws{OneLockPerCustomer: true},
		},
		{
			Name:        "closed-checked-last",
			Mistake:     "The transfer's checks refuse frozen accounts only, and the closed-account rule is checked last, where the answer is built, after the transfer and its SMS are written; its refusal is stored in the request's transaction, as every refusal is",
			Consequence: "A payment from or to a closed account is told 422, and its money moves all the same, SMS and all: the client, told it was refused, pays again",
			Bank:        bank.Flaws{ClosedCheckedLast: true},
		},
		{
			Name:        "receipt-last-value",
			Mistake:     "The answer's transfer id is read back where the answer is built, after the transfer's SMS and event are written, with SELECT last_value FROM transfers_id_seq instead of currval('transfers_id_seq'): the sequence's last value, every session's, not this one's",
			Consequence: "Another request that takes a transfer id between this transfer's INSERT and the read hands its id to this client: the 201, stored as the key's answer and replayed, names another customer's transfer, while the SMS and event name the right one",
			Bank:        bank.Flaws{ReceiptLastValue: true},
		},
		{
			Name:        "frozen-only-inactive",
			Mistake:     "The transfer's check refuses a frozen account only (status = 'frozen') instead of every account that is not active",
			Consequence: "A closed account still sends and receives money: the customer who closed it is paid into an account the bank no longer services",
			Bank:        bank.Flaws{FrozenOnly: true},
		},
		{
			Name:                  "claim-on-request-context",
			Mistake:               "The key is claimed and the transfer run on the request's own context, which ends when the client disconnects",
			Consequence:           "A client that goes away while the claim's INSERT is answered leaves the key committed but unreleased: in progress with nobody working on it, and every retry is told 409 until the lock expires",
			ClaimOnRequestContext: true,
		},
		{
			Name:        "app-clock",
			Mistake:     "Lock expiry and key ages are measured on each app server's own clock instead of the database's",
			Consequence: "A server whose clock runs ahead takes over locks that are still valid; one whose clock runs behind writes keys that the cleanup job deletes while they are fresh, and their retry moves the money again",
			Store:       idem.Flaws{AppClock: true},
		},
		{
			Name:        "jsonb-replay",
			Mistake:     "The stored response is kept as jsonb, as in the lesson's table",
			Consequence: "jsonb reorders the members, so a replay is not the original answer byte for byte: a client that compares or verifies a signature sees a different response",
			Store:       idem.Flaws{JSONBReplay: true},
		},
		{
			Name:        "sms-in-transaction",
			Mistake:     "The SMS is sent from inside the transfer's transaction",
			Consequence: "When the commit then fails, the customer has an SMS for a transfer that never happened",
			Outbox:      outbox.Flaws{SMSInTransaction: true},
		},
		{
			Name:        "sms-after-commit",
			Mistake:     "The SMS is sent after the commit, with nothing recorded in the transaction",
			Consequence: "A server that crashes between the commit and the send never sends it: a committed transfer with no SMS",
			Outbox:      outbox.Flaws{SMSAfterCommit: true},
		},
		{
			Name:        "sms-before-checks",
			Mistake:     "The SMS row is written into the outbox as the request comes in, before the transfer's checks",
			Consequence: "A refusal commits too, with its key's stored answer, and the SMS row with it: the customer is texted \"You sent ₦10,000 to Bola\" for a transfer the bank refused",
			Outbox:      outbox.Flaws{SMSBeforeChecks: true},
		},
		{
			Name:        "sms-per-owned-account",
			Mistake:     "The SMS row is inserted with INSERT … SELECT over the transfer's two accounts, kept to those the sender owns, to address it to the sender",
			Consequence: "A move between two accounts of the same customer matches both rows: the customer is texted twice for one transfer",
			Outbox:      outbox.Flaws{SMSPerOwnedAccount: true},
		},
		{
			Name:        "publish-in-transaction",
			Mistake:     "The transfer's event is published to the log from inside the transaction (the dual write)",
			Consequence: "A rollback leaves an event for a transfer that does not exist, and other services act on it",
			Outbox:      outbox.Flaws{PublishInTransaction: true},
		},
		{
			Name:        "publish-after-commit",
			Mistake:     "The transfer's event is published after the commit, with nothing recorded in the transaction",
			Consequence: "A crash between the commit and the publish loses the event: other services never hear of the transfer",
			Outbox:      outbox.Flaws{PublishAfterCommit: true},
		},
		{
			Name:        "no-event-for-own-accounts",
			Mistake:     "A transfer between two accounts of the same user writes no event outbox row, as if no other service cared about a customer moving money between their own accounts",
			Consequence: "The services that follow the transfers topic (statements, fraud checks, notifications) never hear of those moves: their view of the accounts misses money that moved",
			Outbox:      outbox.Flaws{NoEventForOwnAccounts: true},
		},
		{
			Name:        "no-provider-key",
			Mistake:     "The dispatcher sends the SMS without the outbox row's id as the provider's idempotency key",
			Consequence: "A dispatcher that sent and crashed before marking the row done, or whose answer timed out, sends the SMS again: two messages",
			Outbox:      outbox.Flaws{NoProviderKey: true},
		},
		{
			Name:        "dispatcher-without-skip-locked",
			Mistake:     "The dispatcher claims its batch without FOR UPDATE SKIP LOCKED",
			Consequence: "Two dispatchers polling at once read the same pending rows and both claim them: the later claim overwrites the earlier, and both hold the rows",
			Outbox:      outbox.Flaws{NoSkipLocked: true},
		},
		{
			Name:        "claim-without-lease-check",
			Mistake:     "The dispatcher's claim leaves out its lease condition and trusts FOR UPDATE SKIP LOCKED alone to keep other dispatchers off the rows it holds",
			Consequence: "The row locks end when the claim's short transaction commits: the next poll of another dispatcher claims the rows again while the first is still sending them, and both send",
			Outbox:      outbox.Flaws{NoLeaseCheck: true},
		},
		{
			Name:        "mark-done-without-claim-token",
			Mistake:     "The dispatcher renews and marks a row without checking that it still holds the row's claim token",
			Consequence: "A dispatcher paused past its lease wakes up and sends rows another dispatcher took over: the provider is sent them twice",
			Outbox:      outbox.Flaws{NoClaimToken: true},
		},
		{
			Name:        "give-up-on-same-error",
			Mistake:     "The dispatcher gives a row up for good when its send fails with the same error as the row's last failed send, taking a repeated failure for a permanent one, instead of only after MaxAttempts failed sends",
			Consequence: "A provider timeout is transient and may come again: a row whose send and whose re-send both lose the provider's answer is failed at its second failed send, though the provider sent its SMS once: the row is never marked sent",
			Outbox:      outbox.Flaws{GiveUpOnSameError: true},
		},
		{
			Name:        "consumer-without-dedup",
			Mistake:     "The consumer applies every delivery, with no processed-events marker",
			Consequence: "An event redelivered after a crash before the offset commit is applied twice",
			Outbox:      outbox.Flaws{NoDedup: true},
		},
		{
			Name:        "marker-after-effect",
			Mistake:     "The consumer checks its processed-events marker, applies the event, and writes the marker in a transaction of its own after the effect's",
			Consequence: "A crash between the two commits leaves the effect without its marker: the redelivered event finds none and is applied twice",
			Outbox:      outbox.Flaws{MarkerAfterEffect: true},
		},
		{
			Name:        "offset-before-effect",
			Mistake:     "The consumer commits its offset before applying the event",
			Consequence: "A crash between the two loses the event: the log will not deliver it again, and its effect never happens",
			Outbox:      outbox.Flaws{OffsetBeforeEffect: true},
		},
		{
			Name:        "lock-release-without-token",
			Mistake:     "The lock outside the database is released with a plain DEL instead of compare-and-delete",
			Consequence: "A holder whose lock expired deletes the next holder's lock on waking, and a third takes it: two holders at once",
			Outbox:      outbox.Flaws{LockReleaseWithoutToken: true},
		},
		{
			Name:        "lock-get-then-set",
			Mistake:     "The lock outside the database is taken with a GET, then a SET when the key was free, instead of one SET NX",
			Consequence: "Two servers that try at once (a duplicated request, a retry beside a late one) both find the key free and both set it: two holders, each sure the lock is its own",
			Outbox:      outbox.Flaws{LockGetThenSet: true},
		},
		{
			Name:        "ship-read-then-write",
			Mistake:     "mark-shipped reads the status, checks it in code, and writes 'shipped' unconditionally",
			Consequence: "Two deliveries of one request at once both read 'paid' and both answer \"shipped\": the order is handed to the courier twice",
			Outbox:      outbox.Flaws{ShipReadThenWrite: true},
		},
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns every mistake's name, sorted, for shell completion and for
// the errors that tell a user which names --bug accepts.
func Names() []string {
	var names []string
	for _, b := range All() {
		names = append(names, b.Name)
	}
	return names
}

// Lookup returns the mistake called name. The name comes from a user (a
// --bug flag, a recipe or campaign file), so its error lists the valid names.
func Lookup(name string) (Bug, error) {
	for _, b := range All() {
		if b.Name == name {
			return b, nil
		}
	}
	return Bug{}, fmt.Errorf("unknown bug %q; valid names: %s", name, strings.Join(Names(), ", "))
}
