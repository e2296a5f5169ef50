// Package htmlreport writes bank-sim's HTML reports: one self-contained file
// (inline CSS, SVG and script, nothing fetched when it is viewed), readable
// without colour — every state is also said in words or a symbol — and
// printable.
//
// A report is a Doc of sections; the pictures (sequence diagrams, timelines,
// plots) are SVG drawn with the SVG builder here, so they need no library in
// the page and print as sharply as text. The renderers of chaos runs,
// campaigns, audits, probes and comparisons live here and read the domain's
// values; a story's page is drawn in cmd, from the terminal timeline's model.
package htmlreport

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Doc is one report.
type Doc struct {
	// Kind names what the report is of ("story", "chaos", "audit", …); it is
	// written as the body's data-report attribute so tests and scripts can
	// tell reports apart.
	Kind     string
	Title    string
	Subtitle string
	// Verdict is the one-line outcome shown under the title; OK colours it
	// (and gives it a ✓ or ✗, so it reads without colour too).
	Verdict string
	OK      bool
	// Generator is written in a meta tag and the footer (e.g. "bank-sim v1.2").
	Generator string

	sections []section
	styles   []string
	scripts  []string
}

type section struct {
	id, title string
	body      template.HTML
}

// Section appends a section with an anchor id (linked from the contents).
func (d *Doc) Section(id, title string, body template.HTML) {
	d.sections = append(d.sections, section{id: id, title: title, body: body})
}

// Style adds CSS of a renderer's own to the page.
func (d *Doc) Style(css string) { d.styles = append(d.styles, css) }

// Script adds JavaScript to the end of the page. Reports must read fully
// without it (printing, a viewer with scripts off); scripts only add
// interaction.
func (d *Doc) Script(js string) { d.scripts = append(d.scripts, js) }

// Render writes the whole document.
func (d *Doc) Render(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	// No request may leave the file: the policy forbids every fetch, and
	// runs the page's own scripts only, by their hashes.
	scripts := make([]string, len(d.scripts))
	for i, s := range d.scripts {
		scripts[i] = "\n" + s + "\n"
	}
	b.WriteString(policyMeta("", scripts...))
	if d.Generator != "" {
		fmt.Fprintf(&b, "<meta name=\"generator\" content=\"%s\">\n", Esc(d.Generator))
	}
	fmt.Fprintf(&b, "<title>%s</title>\n<style>\n%s", Esc(d.Title), baseCSS)
	for _, s := range d.styles {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	b.WriteString("</style>\n</head>\n")
	fmt.Fprintf(&b, "<body data-report=\"%s\">\n<header>\n<h1>%s</h1>\n", Esc(d.Kind), Esc(d.Title))
	if d.Subtitle != "" {
		fmt.Fprintf(&b, "<p class=\"sub\">%s</p>\n", Esc(d.Subtitle))
	}
	if d.Verdict != "" {
		fmt.Fprintf(&b, "<p class=\"verdict %s\" id=\"verdict\">%s %s</p>\n", okClass(d.OK), okMark(d.OK), Esc(d.Verdict))
	}
	if len(d.sections) > 1 {
		b.WriteString("<nav><ol>")
		for _, s := range d.sections {
			fmt.Fprintf(&b, "<li><a href=\"#%s\">%s</a></li>", Esc(s.id), Esc(s.title))
		}
		b.WriteString("</ol></nav>\n")
	}
	b.WriteString("</header>\n<main>\n")
	for _, s := range d.sections {
		fmt.Fprintf(&b, "<section id=\"%s\">\n<h2>%s</h2>\n%s\n</section>\n", Esc(s.id), Esc(s.title), s.body)
	}
	b.WriteString("</main>\n")
	if d.Generator != "" {
		fmt.Fprintf(&b, "<footer>Written by %s. This file needs nothing else: no network, no scripts from anywhere.</footer>\n", Esc(d.Generator))
	}
	for _, s := range scripts {
		fmt.Fprintf(&b, "<script>%s</script>\n", s)
	}
	b.WriteString("</body>\n</html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// WriteFile renders d to path. It writes a temporary file beside path and
// renames it, so a failed or interrupted write never leaves half a report
// where the user looks for one.
func WriteFile(path string, d *Doc) error {
	if path == "" {
		return errors.New("--html needs a file name, e.g. --html report.html")
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("--html %s: is a directory; name a file, e.g. --html %s", path, filepath.Join(path, "report.html"))
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("--html %s: cannot write in %s (%v); name a file in a folder you can write to", path, dir, errors.Unwrap(err))
	}
	werr := d.Render(tmp)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--html %s: %v", path, werr)
	}
	return nil
}

// policyMeta is a page's Content-Security-Policy: nothing fetched but
// what extra allows (connect-src 'self' for the classroom page), inline
// styles, and no script but these, each pinned by the SHA-256 of its
// exact text between <script> and </script>: markup that slipped into a
// page past its escaping still runs nothing. No form posts anywhere, and
// no <base> to send relative links elsewhere.
func policyMeta(extra string, scripts ...string) string {
	src := "'none'"
	if len(scripts) > 0 {
		var hashes []string
		for _, s := range scripts {
			sum := sha256.Sum256([]byte(s))
			hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		}
		src = strings.Join(hashes, " ")
	}
	return fmt.Sprintf("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src %s;%s img-src data:; form-action 'none'; base-uri 'none'\">\n", src, extra)
}

// Esc escapes text for HTML element content and attribute values.
func Esc(s string) string { return html.EscapeString(s) }

// Text returns s escaped, as HTML.
func Text(s string) template.HTML { return template.HTML(Esc(s)) }

// Para returns s escaped in a paragraph.
func Para(s string) template.HTML { return template.HTML("<p>" + Esc(s) + "</p>") }

// Pre returns s escaped in a preformatted block (terminal output, recipes).
func Pre(s string) template.HTML { return template.HTML("<pre>" + Esc(s) + "</pre>") }

// Join concatenates pieces of HTML.
func Join(parts ...template.HTML) template.HTML {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(string(p))
	}
	return template.HTML(b.String())
}

// Mark is a state said three ways: a class (colour), a symbol and a word, so
// that the page reads the same printed in black and white.
func Mark(ok bool, word string) template.HTML {
	return template.HTML(fmt.Sprintf("<span class=\"mark %s\">%s %s</span>", okClass(ok), okMark(ok), Esc(word)))
}

func okClass(ok bool) string {
	if ok {
		return "ok"
	}
	return "bad"
}

func okMark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// Cell is one table cell. Class is "ok", "bad", "warn", "num" or a
// renderer's own; Href makes the cell a link (e.g. "#seed-7").
type Cell struct {
	Text  string
	Class string
	Href  string
	Title string
	// HTML, when set, replaces Text (already-escaped content: a Mark, an
	// inline SVG).
	HTML template.HTML
}

// C is a plain text cell.
func C(text string) Cell { return Cell{Text: text} }

// Table is a table with a header row.
type Table struct {
	ID      string
	Caption string
	Head    []string
	Rows    [][]Cell
	// RowIDs, when set, gives each row an anchor id.
	RowIDs []string
}

// HTML renders the table.
func (t Table) HTML() template.HTML {
	var b strings.Builder
	if t.ID != "" {
		fmt.Fprintf(&b, "<table id=\"%s\">", Esc(t.ID))
	} else {
		b.WriteString("<table>")
	}
	if t.Caption != "" {
		fmt.Fprintf(&b, "<caption>%s</caption>", Esc(t.Caption))
	}
	b.WriteString("<thead><tr>")
	for _, h := range t.Head {
		fmt.Fprintf(&b, "<th scope=\"col\">%s</th>", Esc(h))
	}
	b.WriteString("</tr></thead><tbody>\n")
	for i, r := range t.Rows {
		if i < len(t.RowIDs) && t.RowIDs[i] != "" {
			fmt.Fprintf(&b, "<tr id=\"%s\">", Esc(t.RowIDs[i]))
		} else {
			b.WriteString("<tr>")
		}
		for _, c := range r {
			b.WriteString("<td")
			if c.Class != "" {
				fmt.Fprintf(&b, " class=\"%s\"", Esc(c.Class))
			}
			if c.Title != "" {
				fmt.Fprintf(&b, " title=\"%s\"", Esc(c.Title))
			}
			b.WriteString(">")
			content := string(c.HTML)
			if content == "" {
				content = Esc(c.Text)
			}
			if c.Href != "" {
				content = fmt.Sprintf("<a href=\"%s\">%s</a>", Esc(c.Href), content)
			}
			b.WriteString(content)
			b.WriteString("</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody></table>")
	return template.HTML(b.String())
}

const baseCSS = `
:root { --ok: #1a7f37; --bad: #c62828; --warn: #9a6700; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #fff; --soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 1.5rem; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif; color: var(--ink); background: var(--bg); }
h1 { font-size: 1.7rem; margin: 0 0 .25rem; }
h2 { font-size: 1.3rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; margin-top: 2rem; }
h3 { font-size: 1.1rem; }
.sub { color: var(--muted); margin: 0; }
.verdict { font-weight: 700; font-size: 1.2rem; padding: .4rem .7rem; border-left: 6px solid; background: var(--soft); }
.verdict.ok, .mark.ok, td.ok { color: var(--ok); }
.verdict.bad, .mark.bad, td.bad { color: var(--bad); }
td.warn, .warn { color: var(--warn); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
nav ol { display: flex; flex-wrap: wrap; gap: .3rem 1.2rem; padding: 0; list-style: none; margin: .8rem 0 0; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .95rem; }
caption { text-align: left; color: var(--muted); padding-bottom: .2rem; }
th, td { border: 1px solid var(--line); padding: .25rem .55rem; vertical-align: top; }
th { background: var(--soft); text-align: left; }
pre { background: var(--soft); padding: .6rem .8rem; overflow-x: auto; font-size: .85rem; }
code, pre { font-family: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, monospace; }
svg { max-width: 100%; height: auto; }
svg text { font-family: system-ui, sans-serif; fill: var(--ink); }
footer { margin-top: 3rem; color: var(--muted); font-size: .85rem; border-top: 1px solid var(--line); padding-top: .5rem; }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  nav, .noprint { display: none; }
  section { break-inside: avoid-page; }
  a { color: inherit; text-decoration: none; }
}
`

var (
	policyRE = regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]*)">`)
	scriptRE = regexp.MustCompile(`(?s)<script>(.*?)</script>`)
)

// PolicyProblems says what is wrong with page's Content-Security-Policy:
// an inline script whose hash it does not list, 'unsafe-inline' scripts,
// form posts or <base> allowed. Tests of every page that bank-sim writes
// call it; nil means none.
func PolicyProblems(page []byte) []string {
	m := policyRE.FindAllSubmatch(page, -1)
	if len(m) != 1 {
		return []string{fmt.Sprintf("%d Content-Security-Policy meta elements, want 1", len(m))}
	}
	directives := map[string]string{}
	for _, d := range strings.Split(html.UnescapeString(string(m[0][1])), ";") {
		if f := strings.Fields(d); len(f) > 0 {
			directives[f[0]] = strings.Join(f[1:], " ")
		}
	}
	var out []string
	src := " " + directives["script-src"] + " "
	if strings.Contains(src, "'unsafe-inline'") || strings.Contains(src, "'unsafe-eval'") || strings.Contains(src, "*") {
		out = append(out, "script-src allows more than the page's own scripts: "+directives["script-src"])
	}
	for _, d := range []string{"form-action", "base-uri", "default-src"} {
		if directives[d] != "'none'" {
			out = append(out, fmt.Sprintf("%s is %q, not 'none'", d, directives[d]))
		}
	}
	scripts := scriptRE.FindAllSubmatch(page, -1)
	if n := bytes.Count(page, []byte("<script")); n != len(scripts) {
		out = append(out, fmt.Sprintf("%d <script elements, %d of them plain <script>…</script>", n, len(scripts)))
	}
	for i, s := range scripts {
		sum := sha256.Sum256(s[1])
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(src, " "+h+" ") {
			out = append(out, fmt.Sprintf("script %d (hash %s) is not in script-src %s", i+1, h, directives["script-src"]))
		}
	}
	return out
}
