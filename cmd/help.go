package cmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroupKey is the annotation that files a flag under a heading of its
// command's help.
const flagGroupKey = "bank-sim/group"

// flagGroup is one heading of a command's flags and the flags under it, in
// the order the help shows them.
type flagGroup struct {
	title string
	flags []string
}

// groupFlags files c's flags under groups' headings and makes c's usage
// show them so: a big command's flags (chaos has 50) found by what they are
// about, not in one alphabetical list. A flag left out of every group is
// shown under "Other flags", where a test finds it.
func groupFlags(c *cobra.Command, groups []flagGroup) {
	for _, g := range groups {
		for _, name := range g.flags {
			if c.Flags().Lookup(name) == nil {
				panic(fmt.Sprintf("groupFlags: %s has no flag --%s", c.Name(), name))
			}
			_ = c.Flags().SetAnnotation(name, flagGroupKey, []string{g.title})
		}
	}
	c.SetUsageFunc(func(c *cobra.Command) error {
		return groupedUsage(c.OutOrStderr(), c, groups)
	})
}

// groupedUsage is cobra's usage with the local flags under their groups'
// headings.
func groupedUsage(w io.Writer, c *cobra.Command, groups []flagGroup) error {
	var b strings.Builder
	b.WriteString("Usage:\n  " + c.UseLine())
	if c.HasExample() {
		b.WriteString("\n\nExamples:\n" + c.Example)
	}
	for _, g := range groupedFlagSets(c, groups) {
		fmt.Fprintf(&b, "\n\n%s:\n%s", g.title, strings.TrimRight(g.set.FlagUsages(), " \n"))
	}
	if c.HasAvailableInheritedFlags() {
		b.WriteString("\n\nGlobal Flags:\n" + strings.TrimRight(c.InheritedFlags().FlagUsages(), " \n"))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// flagSetGroup is one heading's flags, as a flag set pflag can print.
type flagSetGroup struct {
	title string
	set   *pflag.FlagSet
}

// groupedFlagSets are c's local flags by group, in the groups' order and
// each group's, then "Other flags" for any flag in none. --help, which
// cobra adds as it runs, closes the last group.
func groupedFlagSets(c *cobra.Command, groups []flagGroup) []flagSetGroup {
	set := func(title string) *pflag.FlagSet {
		s := pflag.NewFlagSet(title, pflag.ContinueOnError)
		s.SortFlags = false
		return s
	}
	var out []flagSetGroup
	for _, g := range groups {
		s := set(g.title)
		for _, name := range g.flags {
			if f := c.LocalFlags().Lookup(name); f != nil && !f.Hidden {
				s.AddFlag(f)
			}
		}
		out = append(out, flagSetGroup{g.title, s})
	}
	other := set("Other flags")
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Hidden || len(f.Annotations[flagGroupKey]) > 0:
		case f.Name == "help" && len(out) > 0:
			out[len(out)-1].set.AddFlag(f)
		default:
			other.AddFlag(f)
		}
	})
	if other.HasFlags() {
		out = append(out, flagSetGroup{"Other flags", other})
	}
	return out
}
