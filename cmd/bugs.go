package cmd

import (
	"fmt"

	"github.com/banksim/bank-sim/idem/mistakes"
)

// listBugs prints the bug catalogue: each mistake and what it costs.
func listBugs(app *App, asJSON bool) error {
	out := app.Env.Stdout
	if asJSON {
		return writeJSON(out, mistakes.All())
	}
	p := app.palette()
	for _, b := range mistakes.All() {
		fmt.Fprintf(out, "%s\n  %s\n  %s\n", p.bold.Sprint(b.Name), b.Mistake+".", p.dim.Sprint("→ "+b.Consequence+"."))
	}
	fmt.Fprintln(out, p.dim.Sprint("\nRun one with: bank-sim scenario --all --bug NAME, bank-sim chaos --bug NAME, or serve one with bank-sim serve --bug NAME; all of them: bank-sim audit"))
	return nil
}
