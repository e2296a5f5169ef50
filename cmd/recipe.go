package cmd

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/scenarios"
)

// recipeScenario is the story of a chaos recipe ('bank-sim scenario
// --recipe FILE'): its phases replay the shrunk run with the recipe's
// mistake (which must break the recipe's rule again) and with the correct
// handler (which must keep every rule).
//
// bug is scenario --bug's name ("" for none): it runs in the second phase,
// whose title says so.
func recipeScenario(path, bug string, all bool, args []string) ([]scenarios.Scenario, error) {
	if all || len(args) > 0 {
		return nil, usageError("--recipe replays one recipe; give no scenario names and no --all with it")
	}
	r, err := chaos.LoadRecipe(path)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return nil, usageError("--recipe: cannot read %s (%s)", path, plainIOError(err))
	case err != nil:
		if bad := jsonFileProblem(path, "a bank-sim recipe", "save one with 'bank-sim chaos --shrink --save-recipe FILE'", err); bad != nil {
			return nil, usageError("--recipe: %v", bad)
		}
		return nil, usageError("--recipe: %v", err)
	}
	return []scenarios.Scenario{r.Scenario("recipe "+filepath.Base(path), bug)}, nil
}
