package faults

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// DBFault is what the DB proxy does to one COMMIT between an application
// and its PostgreSQL.
type DBFault int

const (
	// DBCutBeforeCommit drops the client's COMMIT (and whatever it sent
	// with it) and closes both connections: PostgreSQL rolls the
	// transaction back, and the application hears its connection die.
	DBCutBeforeCommit DBFault = iota + 1
	// DBLoseCommitAnswer lets the COMMIT through, then drops PostgreSQL's
	// answer to it and closes both connections: the transaction is
	// committed, and the application cannot know.
	DBLoseCommitAnswer
)

func (f DBFault) String() string {
	switch f {
	case DBCutBeforeCommit:
		return "cut before the commit"
	case DBLoseCommitAnswer:
		return "commit's answer lost"
	}
	return "none"
}

// DBProxy is a TCP proxy in front of PostgreSQL that reads the wire
// protocol (v3) as it passes, so that it can fail one COMMIT: the team
// points its application's database URL at Addr, as it would at toxiproxy.
// It sees COMMIT sent as a simple query, and as an extended-protocol
// statement, also one a driver prepared once and binds by name (pgx's
// statement cache). A connection that negotiates TLS or GSS encryption is
// passed through unread: its commits cannot be failed.
type DBProxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	fault DBFault
	nth   int // fire at the nth commit seen since Arm
	seen  int
	fired string // what happened, once fired
	conns map[*dbConn]bool
	done  bool

	opaque atomic.Int64 // connections passed through unread
}

// StartDBProxy listens on listen ("127.0.0.1:6433") and forwards every
// connection to upstream, PostgreSQL's address.
func StartDBProxy(listen, upstream string) (*DBProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("the database proxy cannot listen on %s: %w", listen, err)
	}
	p := &DBProxy{ln: ln, upstream: upstream, conns: map[*dbConn]bool{}}
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens.
func (p *DBProxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the PostgreSQL the proxy forwards to.
func (p *DBProxy) Upstream() string { return p.upstream }

// Opaque is how many connections were encrypted, and so passed through
// without their commits being seen.
func (p *DBProxy) Opaque() int64 { return p.opaque.Load() }

// Arm makes f happen to the nth COMMIT (counted from 1) that passes from
// now on, once; the proxy heals by itself after it: later connections and
// commits pass untouched.
func (p *DBProxy) Arm(f DBFault, nth int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.nth, p.seen, p.fired = f, nth, 0, ""
}

// Disarm ends the armed fault and says what it did: "" when it never
// fired (fewer commits passed than it waited for).
func (p *DBProxy) Disarm() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	fired := p.fired
	p.fault, p.fired = 0, ""
	return fired
}

// Close stops listening and closes every connection.
func (p *DBProxy) Close() error {
	p.mu.Lock()
	p.done = true
	conns := p.conns
	p.conns = map[*dbConn]bool{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
	return p.ln.Close()
}

// commit is called for each COMMIT seen on the side where f acts; it
// reports whether this one is to be failed.
func (p *DBProxy) commit(f DBFault) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault != f || p.fired != "" {
		return false
	}
	p.seen++
	if p.seen != p.nth {
		return false
	}
	switch f {
	case DBCutBeforeCommit:
		p.fired = fmt.Sprintf("the database connection was cut before COMMIT no. %d reached PostgreSQL (it rolled the transaction back)", p.nth)
	case DBLoseCommitAnswer:
		p.fired = fmt.Sprintf("PostgreSQL committed COMMIT no. %d, and its answer was dropped on the way back", p.nth)
	}
	return true
}

func (p *DBProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

// dbConn is one client connection and its upstream.
type dbConn struct {
	client, server net.Conn
	once           sync.Once
	// sslAsked: the client asked for TLS or GSS encryption; the server's
	// next byte is its one-byte answer. opaque: it said yes.
	sslAsked, opaque atomic.Bool
	// stmts: which prepared statements (by name) are a COMMIT.
	mu    sync.Mutex
	stmts map[string]bool
}

func (c *dbConn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func (p *DBProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &dbConn{client: client, server: server, stmts: map[string]bool{}}
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	go func() {
		defer c.close()
		p.frontend(c)
	}()
	p.backend(c)
}

// pump copies messages from r to w one at a time, flushing whenever r has
// nothing more buffered (so that the packets' batching is kept); inspect
// sees each whole message first and says whether to cut the connection
// instead of forwarding it.
type pump struct {
	r *bufio.Reader
	w *bufio.Writer
}

func newPump(src, dst net.Conn) *pump {
	return &pump{r: bufio.NewReaderSize(src, 64<<10), w: bufio.NewWriterSize(dst, 64<<10)}
}

// message reads one message: its type byte (0 for an untyped one), and its
// whole bytes.
func (p *pump) message(typed bool) (byte, []byte, error) {
	head := 4
	if typed {
		head = 5
	}
	h, err := p.r.Peek(head)
	if err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[head-4:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("not the PostgreSQL protocol")
	}
	msg := make([]byte, head-4+n)
	if _, err := io.ReadFull(p.r, msg); err != nil {
		return 0, nil, err
	}
	var t byte
	if typed {
		t = msg[0]
	}
	return t, msg, nil
}

// send forwards msg, flushing when nothing more is waiting to be read.
func (p *pump) send(msg []byte) error {
	if _, err := p.w.Write(msg); err != nil {
		return err
	}
	if p.r.Buffered() == 0 {
		return p.w.Flush()
	}
	return nil
}

// passThrough copies the rest of the stream unread.
func (p *pump) passThrough() {
	if err := p.w.Flush(); err != nil {
		return
	}
	_, _ = io.Copy(p.w, p.r)
	_ = p.w.Flush()
}

// Startup request codes (the first, untyped message's).
const (
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// frontend reads the client's side: the untyped startup messages, then
// typed ones; a COMMIT is a simple query, or the Bind of a statement whose
// Parse was a COMMIT.
func (p *DBProxy) frontend(c *dbConn) {
	pm := newPump(c.client, c.server)
	startup := true
	for {
		if _, err := pm.r.Peek(1); err != nil {
			return
		}
		if c.opaque.Load() {
			p.opaque.Add(1)
			pm.passThrough()
			return
		}
		t, msg, err := pm.message(!startup)
		if err != nil {
			pm.passThrough()
			return
		}
		if startup {
			code := binary.BigEndian.Uint32(msg[4:8])
			if code == pgSSLRequest || code == pgGSSENCRequest {
				c.sslAsked.Store(true)
			} else {
				startup = false // the startup message (or a cancel request)
			}
		} else if p.frontendCommit(c, t, msg[5:]) && p.commit(DBCutBeforeCommit) {
			return // the COMMIT and what came with it are never sent
		}
		if err := pm.send(msg); err != nil {
			return
		}
	}
}

// frontendCommit reports whether a client message runs a COMMIT, and
// remembers which prepared statements are one.
func (p *DBProxy) frontendCommit(c *dbConn, t byte, body []byte) bool {
	switch t {
	case 'Q':
		q, _ := cstring(body)
		return IsCommitSQL(q)
	case 'P':
		name, rest := cstring(body)
		q, _ := cstring(rest)
		c.mu.Lock()
		c.stmts[name] = IsCommitSQL(q)
		c.mu.Unlock()
	case 'B':
		_, rest := cstring(body) // the portal
		stmt, _ := cstring(rest)
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.stmts[stmt]
	}
	return false
}

// backend reads PostgreSQL's side: a one-byte answer to an encryption
// request, then typed messages; a COMMIT's answer is the CommandComplete
// tagged COMMIT.
func (p *DBProxy) backend(c *dbConn) {
	pm := newPump(c.server, c.client)
	for {
		if _, err := pm.r.Peek(1); err != nil {
			return
		}
		if c.sslAsked.Swap(false) {
			b, _ := pm.r.ReadByte()
			if b == 'S' || b == 'G' {
				c.opaque.Store(true)
			}
			if err := pm.w.WriteByte(b); err != nil || pm.w.Flush() != nil {
				return
			}
			if c.opaque.Load() {
				pm.passThrough()
				return
			}
			continue
		}
		t, msg, err := pm.message(true)
		if err != nil {
			pm.passThrough()
			return
		}
		if t == 'C' {
			if tag, _ := cstring(msg[5:]); tag == "COMMIT" && p.commit(DBLoseCommitAnswer) {
				return // committed; the answer is never delivered
			}
		}
		if err := pm.send(msg); err != nil {
			return
		}
	}
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	i := strings.IndexByte(string(b), 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

var commitSQL = regexp.MustCompile(`(?is)^\s*(commit|end)(\s+(work|transaction))?\s*;?\s*$`)

// IsCommitSQL reports whether the last statement of q is a COMMIT.
func IsCommitSQL(q string) bool {
	parts := strings.Split(strings.TrimRight(strings.TrimSpace(q), ";"), ";")
	return commitSQL.MatchString(parts[len(parts)-1])
}
