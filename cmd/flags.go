package cmd

import (
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// pflag's parse errors name Go's parsers ("strconv.ParseInt: parsing
// "abc": invalid syntax", "time: invalid duration"). flagError says the
// same in the user's terms: which flag, what was given, what it takes.
var badFlagValue = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: `)

// unknownFlag is pflag's word for a flag the command does not have.
var unknownFlag = regexp.MustCompile(`^unknown flag: --([\w-]+)$`)

func flagError(c *cobra.Command, err error) string {
	msg := err.Error()
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		// A slip between commands ("scenario --fault", "chaos --faults")
		// or of the keyboard: name the flag meant.
		var names []string
		c.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		if close := closest(m[1], names); len(close) > 0 {
			for i := range close {
				close[i] = "--" + close[i]
			}
			return msg + "; did you mean " + orList(close) + "?"
		}
		return msg
	}
	m := badFlagValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name := m[1], m[2]
	want := "a valid value"
	if f := c.Flags().Lookup(name); f != nil {
		switch f.Value.Type() {
		case "int", "int64", "int32", "uint", "uint64", "uint32":
			want = "a whole number"
		case "duration":
			want = "a duration such as 500ms, 10s, 2m or 1h"
		case "bool":
			want = "true or false"
		case "float64", "float32":
			want = "a number"
		case "STATUS[:CODE]": // --key-refusal
			want = "STATUS or STATUS:CODE with a 4xx status, like 417 or 422:IDEMPOTENCY_FINGERPRINT_MISMATCH"
		}
	}
	return "--" + name + " " + quoteValue(value) + " is not " + want
}

func quoteValue(v string) string {
	if strings.ContainsAny(v, " \"'") || v == "" {
		return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
	}
	return `"` + v + `"`
}
