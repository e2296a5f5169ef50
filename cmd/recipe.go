package cmd

import (
	"path/filepath"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/scenarios"
)

// recipeScenario is the story of a chaos recipe ('bank-sim scenario
// --recipe FILE'): its phases replay the shrunk run with the recipe's
// mistake (which must break the recipe's rule again) and with the correct
// handler (which must keep every rule).
func recipeScenario(path string, all bool, args []string) ([]scenarios.Scenario, error) {
	if all || len(args) > 0 {
		return nil, usageError("--recipe replays one recipe; give no scenario names and no --all with it")
	}
	r, err := chaos.LoadRecipe(path)
	if err != nil {
		return nil, usageError("--recipe: %v", err)
	}
	return []scenarios.Scenario{r.Scenario("recipe " + filepath.Base(path))}, nil
}
