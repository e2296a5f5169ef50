package cmd

import "github.com/fatih/color"

// palette is the few colours bank-sim uses. Each is its own color.Color with
// colour switched on or off explicitly, so that the decision (NO_COLOR,
// --no-color, not a terminal) is made once, here, and never by a global.
type palette struct {
	ok, bad, warn, dim, bold, head *color.Color
}

func newPalette(enabled bool) *palette {
	p := &palette{
		ok:   color.New(color.FgGreen),
		bad:  color.New(color.FgRed, color.Bold),
		warn: color.New(color.FgYellow),
		dim:  color.New(color.Faint),
		bold: color.New(color.Bold),
		head: color.New(color.FgCyan, color.Bold),
	}
	for _, c := range []*color.Color{p.ok, p.bad, p.warn, p.dim, p.bold, p.head} {
		if enabled {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	return p
}

// colorEnabled follows the conventions: NO_COLOR (any value) and --no-color
// switch colour off, and so does output that is not a terminal.
func (a *App) colorEnabled() bool {
	if a.noColor || a.Env.Getenv("NO_COLOR") != "" || a.Env.Getenv("TERM") == "dumb" {
		return false
	}
	return a.Env.Terminal
}

func (a *App) palette() *palette { return newPalette(a.colorEnabled()) }
