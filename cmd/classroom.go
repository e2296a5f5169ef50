package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/scenarios"
)

// scenario --step --web: the story --step tells in the terminal, also on a
// page for a projector. The page is served on 127.0.0.1 only; it shows each
// phase's sequence diagram growing as the story goes, and the instructor
// advances from the terminal (Enter) or the page (Next, space, →): both
// feed the one pacer, so the story holds at the same places either way.
// It lives in cmd because it draws from the timeline's model (items) and
// is driven by --step's pacer.

// Bounds of the page's server: every read and wait ends.
const (
	classroomHold     = 20 * time.Second // a page's request for news is held this long at most
	classroomFarewell = 3 * time.Second  // at the end, how long the page gets to fetch the last state
	// classroomPolls is how many requests for news are held at once: a
	// classroom projects one page, maybe a few tabs; a script that opens
	// thousands would hold a goroutine and a connection each, so the
	// ones over the cap are told at once to come back later.
	classroomPolls = 8
)

type classroom struct {
	ln   net.Listener
	srv  *http.Server
	url  string
	page []byte
	// keys feeds the pacer: the terminal's keys, and the page's Next.
	keys chan byte

	mu      sync.Mutex
	state   htmlreport.ClassroomState
	changed chan struct{} // closed and replaced at each change
	closing chan struct{} // closed when the server is about to stop
	// A page is watching while it holds a request for news (active), or
	// has just been answered and is about to ask again (lastPoll).
	active   int
	lastPoll time.Time
	sawLast  chan struct{} // closed when a page has been given the last state
	story    scenarios.Scenario
	phases   []*classPhase
	earlier  []template.HTML // the verdicts of the stories before this one
	ending   template.HTML   // this story's verdict, once it has one
}

type classPhase struct {
	index, of int
	p         scenarios.Phase
	events    []scenarios.Event
	report    *scenarios.PhaseReport
}

// startClassroom listens on an ephemeral port of 127.0.0.1 and serves the
// page until close.
func startClassroom() (*classroom, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("--web: cannot listen on 127.0.0.1 (%v)", err)
	}
	c := &classroom{ln: ln, url: "http://" + ln.Addr().String() + "/", keys: make(chan byte),
		changed: make(chan struct{}), closing: make(chan struct{}), sawLast: make(chan struct{})}
	c.page = htmlreport.ClassroomPage("bank-sim · classroom", "/state", "/next")
	c.state.Status = "starting PostgreSQL…"
	mux := http.NewServeMux()
	mux.HandleFunc("/", c.serveIndex)
	mux.HandleFunc("/state", c.serveState)
	mux.HandleFunc("/next", c.serveNext)
	c.srv = &http.Server{Handler: c.local(mux), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: classroomHold + 10*time.Second, IdleTimeout: 30 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// local refuses requests not addressed to this server by its loopback
// name (a web page elsewhere that resolves its own name to 127.0.0.1), and
// a Next posted from another origin.
func (c *classroom) local(h http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(c.ln.Addr().String())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "127.0.0.1:"+port && r.Host != "localhost:"+port {
			http.Error(w, "this page is served as "+c.url+" only", http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "requests from other pages are refused", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (c *classroom) serveIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(c.page)
}

// serveState answers ?after=VERSION with the first state newer than it,
// holding the request (at most classroomHold) until there is one; beyond
// classroomPolls held at once, it answers 503 at once.
func (c *classroom) serveState(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.Atoi(r.URL.Query().Get("after"))
	c.mu.Lock()
	if c.active >= classroomPolls {
		c.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("%d pages are already waiting for news: close some", classroomPolls), http.StatusServiceUnavailable)
		return
	}
	c.active++
	c.mu.Unlock()
	hold := time.NewTimer(classroomHold)
	defer hold.Stop()
	defer func() {
		c.mu.Lock()
		c.active--
		c.lastPoll = time.Now()
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		s, changed := c.state, c.changed
		c.mu.Unlock()
		if s.Version > after || s.Done {
			break
		}
		select {
		case <-changed:
			continue
		case <-hold.C:
		case <-c.closing:
		case <-r.Context().Done():
			return
		}
		break
	}
	c.mu.Lock()
	s := c.state
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(s); err == nil && s.Done {
		c.mu.Lock()
		select {
		case <-c.sawLast:
		default:
			close(c.sawLast)
		}
		c.mu.Unlock()
	}
}

// serveNext advances the story if it is holding; a Next while it runs is
// dropped, so that a double click does not skip a step.
func (c *classroom) serveNext(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST to advance", http.StatusMethodNotAllowed)
		return
	}
	select {
	case c.keys <- '\n':
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// feed forwards the terminal's keys to the pacer. The end of input only
// ends the terminal's part: the page can still advance.
func (c *classroom) feed(ctx context.Context, terminal <-chan byte) {
	go func() {
		for k := range terminal {
			select {
			case c.keys <- k:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// publish makes the current stage the page's next state. Call with c.mu.
func (c *classroom) publish() {
	c.state.Version++
	c.state.Stage = string(c.stage())
	close(c.changed)
	c.changed = make(chan struct{})
}

// waiting is the pacer's hook: the story holds (or goes on).
func (c *classroom) waiting(w bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Waiting = w
	if w {
		c.state.Pauses++
		c.state.Status = "Next ▸ (or space, →) here, or Enter in the terminal"
	} else {
		c.state.Status = "running…"
	}
	c.publish()
}

// finish publishes the last state: the run's verdict, or that it stopped.
func (c *classroom) finish(verdict string, ok bool, status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Done, c.state.Waiting = true, false
	c.state.Verdict, c.state.OK, c.state.Status = verdict, ok, status
	c.publish()
}

// close stops the server, after giving a page that is watching a moment
// to fetch the last state, so the verdict stays on the projector.
func (c *classroom) close() {
	c.mu.Lock()
	watching := c.active > 0 || time.Since(c.lastPoll) < time.Second
	c.mu.Unlock()
	if watching {
		select {
		case <-c.sawLast:
		case <-time.After(classroomFarewell):
		}
	}
	close(c.closing)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		_ = c.srv.Close()
	}
}

// stage is the story so far as HTML: each phase's diagram, and once a
// phase has ended its balances and verdict.
func (c *classroom) stage() template.HTML {
	var b strings.Builder
	b.WriteString(string(htmlreport.Join(c.earlier...)))
	if c.story.Name != "" {
		fmt.Fprintf(&b, `<h2 class="story">%s · %s</h2>`, htmlreport.Esc(c.story.Name), htmlreport.Esc(c.story.DisplayTitle()))
	}
	for _, ph := range c.phases {
		r := scenarios.PhaseReport{Title: ph.p.Title, Control: ph.p.Control, Events: ph.events}
		if ph.report != nil {
			r = *ph.report
		}
		h := newHumanizer(r.Labels)
		fmt.Fprintf(&b, `<div class="phase" data-phase="%d" data-ended="%t"><h3>%d/%d · %s</h3>`,
			ph.index+1, ph.report != nil, ph.index+1, ph.of, htmlreport.Esc(r.Title))
		b.WriteString(string(sequenceOf(r.Title, items(r, h)).SVG()))
		if ph.report != nil {
			fmt.Fprintf(&b, `<p class="balances">%s</p><p class="phaseverdict %s">%s</p>`,
				htmlreport.Esc(r.Balances), phaseClass(r), htmlreport.Esc(phaseVerdict(r, h)))
		}
		b.WriteString("</div>")
	}
	b.WriteString(string(c.ending))
	return template.HTML(b.String())
}

// classroomObserver shows the story on the page beside the terminal's
// story. The order matters where the story holds: a step is added to the
// page after the terminal's pause before it (so both show the same), and a
// phase's verdict before the pause after it.
type classroomObserver struct {
	story scenarios.Observer
	c     *classroom
}

func (o classroomObserver) ScenarioStart(s scenarios.Scenario, seed uint64) {
	c := o.c
	c.mu.Lock()
	if c.ending != "" {
		c.earlier, c.ending = append(c.earlier, c.ending), ""
	}
	c.story, c.phases = s, nil
	c.state.Status = "running…"
	c.publish()
	c.mu.Unlock()
	o.story.ScenarioStart(s, seed)
}

func (o classroomObserver) PhaseStart(p scenarios.Phase, i int) {
	c := o.c
	c.mu.Lock()
	c.phases = append(c.phases, &classPhase{index: i, of: len(c.story.Phases), p: p})
	c.publish()
	c.mu.Unlock()
	o.story.PhaseStart(p, i)
}

func (o classroomObserver) Event(e scenarios.Event) {
	o.story.Event(e)
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.phases); n > 0 {
		ph := c.phases[n-1]
		ph.events = append(ph.events, e)
		c.publish()
	}
}

func (o classroomObserver) PhaseEnd(r scenarios.PhaseReport) {
	c := o.c
	c.mu.Lock()
	if n := len(c.phases); n > 0 {
		c.phases[n-1].report = &r
		c.publish()
	}
	c.mu.Unlock()
	o.story.PhaseEnd(r)
}

func (o classroomObserver) ScenarioEnd(r scenarios.Report) {
	o.story.ScenarioEnd(r)
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	word := "PASS"
	if !r.Passed {
		word = "FAIL"
	}
	c.ending = template.HTML(fmt.Sprintf(`<p class="phaseverdict %s" data-story="%s">%s %s %s</p>`,
		phaseClass(scenarios.PhaseReport{Passed: r.Passed}), htmlreport.Esc(r.Scenario), okMarkOf(r.Passed), word, htmlreport.Esc(r.Scenario)))
	c.publish()
}

func okMarkOf(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

var errNoWeb = errors.New("--web shows --step's story in a browser: add --step (bank-sim scenario NAME --step --web)")
