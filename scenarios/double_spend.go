package scenarios

import (
	"context"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// The lesson's warning, staged: Bola has ₦15,000 and sends ₦10,000 to Ada
// twice at the same moment, from his phone and from his laptop — two
// intents, two keys. Both read ₦15,000. With the balance read, compared in
// the app and written back, both decide the money is there and both write
// ₦5,000: ₦20,000 leaves a ₦15,000 account, and the bank has ₦10,000 more
// than it should. With one conditional UPDATE under the row lock, the second
// sees ₦5,000 and is refused.
func init() {
	race := func(ctx context.Context, r *Run, h *idem.Handler) ([2]bank.Response, error) {
		net := r.Network(h, nil)
		r.Step("Ada sends Bola ₦10,000: he now has ₦15,000")
		if _, err := r.SendSetup(ctx, net, r.AdaTap("ada-pays-bola"), 1, "Ada's transfer"); err != nil {
			return [2]bank.Response{}, err
		}
		req := bank.TransferRequest{From: 2, To: 1, AmountKobo: r.Amount()}
		phone := Intent{Label: "bola-phone", Human: "Bola's phone", UserID: 2, Key: r.Key(), Request: req}
		laptop := Intent{Label: "bola-laptop", Human: "Bola's laptop", UserID: 2, Key: r.Key(), Request: req}
		r.Step("Bola sends Ada %s from his phone and from his laptop at the same moment", bank.Naira(req.AmountKobo))

		// The phone's transfer stops after its checks, holding Bola's row;
		// the laptop's reads the balance and queues for the row; then the
		// phone's commits, and the laptop's goes on with what it read.
		checked, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		phoneCtx := bank.WithAfterChecks(ctx, func() {
			once.Do(func() {
				close(checked)
				select {
				case <-release:
				case <-time.After(stageTimeout):
				}
			})
		})
		var answers [2]bank.Response
		var wg sync.WaitGroup
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		// Whatever goes wrong, the phone's transfer is let go and awaited.
		defer wg.Wait()
		defer free()
		phoneDone := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(phoneDone)
			answers[0], _ = r.Send(phoneCtx, net, phone, 1, "phone")
		}()
		// The laptop's transfer commits (if it gets that far) only once the
		// phone's has been answered: the same order on every run. Under a
		// mistake (no row lock) the laptop's does not queue for the row: it
		// reaches its commit, or its answer, while the phone's is held, and
		// the phone's then queues for the row the laptop's wrote; the
		// laptop's commits once it does, or the two would wait for each
		// other until the stage's bound.
		laptopPast := make(chan struct{})
		var pastOnce sync.Once
		past := func() { pastOnce.Do(func() { close(laptopPast) }) }
		laptopCtx := idem.WithHooks(ctx, idem.Hooks{BeforeCommit: func(context.Context) error {
			past()
			_, _ = waitForLockWaitersOr(ctx, r, 1, phoneDone)
			return nil
		}})
		if err := await(ctx, checked, "the phone's transfer to pass its checks"); err != nil {
			return answers, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer past()
			answers[1], _ = r.Send(laptopCtx, net, laptop, 1, "laptop")
		}()
		queued, err := waitForLockWaitersOr(ctx, r, 1, laptopPast)
		if err != nil {
			return answers, err
		}
		if queued {
			r.Server("the laptop's transfer has read Bola's balance and waits for the row the phone's holds")
		} else {
			r.Server("the laptop's transfer has read Bola's balance and went on without waiting for the row")
		}
		free()
		wg.Wait()
		return answers, nil
	}

	Register(Scenario{
		Name:    "double-spend",
		Title:   "Enough money, atomically",
		Lesson:  "Think before you move money: enough money, atomically",
		Order:   OrderBalanceRace,
		Amount:  1_000_000,
		Summary: "Bola has ₦15,000 and sends ₦10,000 twice at once: read, compared and written back, both pass and ₦20,000 leaves his account",
		Explain: Explanation{
			Shows: "Bola has ₦15,000. He sends Ada ₦10,000 from his phone and, at the same moment, ₦10,000 " +
				"from his laptop: two separate transfers that both look at his balance before either has " +
				"changed it. bank-sim stages the moment: the laptop reads the balance while the phone's " +
				"transfer is between its checks and its write.",
			Breaks: "Read the balance, compare it in the app, write the new balance back: both transfers " +
				"read ₦15,000, both decide ₦10,000 is there, and both write ₦5,000. ₦20,000 left an account " +
				"that held ₦15,000; the transfers say Bola should have ₦-5,000, the account says ₦5,000, and " +
				"the bank holds ₦10,000 that came from nowhere.",
			Defence: "Make the check and the write one statement: a conditional UPDATE that debits only if " +
				"the money is there, on a row locked for the transaction (FOR UPDATE). The second transfer " +
				"waits for the first, then finds ₦5,000 and is refused 422 insufficient_funds. A CHECK " +
				"(balance_kobo >= 0) constraint is the safety net under it.",
			SQL: "SELECT owner_id, status FROM accounts\n" +
				" WHERE id IN ($1, $2) ORDER BY id FOR UPDATE;\n" +
				"UPDATE accounts SET balance_kobo = balance_kobo - $3\n" +
				" WHERE id = $1 AND balance_kobo >= $3\n" +
				"RETURNING balance_kobo;  -- no row: 422 insufficient_funds",
		},
		Phases: []Phase{{
			Title:   "without protection: the balance read, compared in the app and written back",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.Bank = bank.Flaws{ReadCompareWrite: true}
				answers, err := race(ctx, r, h)
				if err != nil {
					return err
				}
				r.Lesson().Expect(answers[0].Status == 201 && answers[1].Status == 201,
					"both read ₦15,000, both decide ₦10,000 is fine, both are told 201")
				return nil
			},
		}, {
			Title: "with protection: a row lock and a conditional debit in one statement",
			Run: func(ctx context.Context, r *Run) error {
				answers, err := race(ctx, r, r.Handler(nil))
				if err != nil {
					return err
				}
				r.Expect(answers[0].Status == 201, "the phone's transfer, first to the row, succeeds: 201")
				r.Expect(answers[1].Status == 422 && answers[1].Code() == bank.CodeInsufficientFunds,
					"the laptop's waits for the row, then finds ₦5,000: 422 insufficient_funds")
				r.ExpectBalances(ctx, 5_000_000, 500_000, 2_000_000)
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}},
	})
}
