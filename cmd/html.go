package cmd

import (
	"fmt"

	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/spf13/pflag"
)

// addHTMLFlag registers --html FILE, the same words on every command that
// writes a report.
func addHTMLFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "html", "", "also write a self-contained HTML report to `FILE` (opens offline, prints)")
}

// writeHTML writes d to path (whole or not at all) and says where on
// stderr, so stdout stays the run's own output. Call checkWritableFlag("--html",
// path) before the run, so a bad path costs nothing.
func writeHTML(e *Env, path string, d *htmlreport.Doc) error {
	d.Generator = "bank-sim " + version()
	if err := htmlreport.WriteFile(path, d); err != nil {
		return &ExitError{Code: ExitFailed, Err: err}
	}
	fmt.Fprintf(e.Stderr, "HTML report: %s\n", path)
	return nil
}
