package postgres

import (
	"fmt"
	"strings"
)

// When an embedded server's postmaster dies without being asked to (kill
// -9, the OOM killer, a crash), its supervisor starts it again on the same
// data directory and port; PostgreSQL recovers from its WAL, so every
// committed transaction is still there, and pools reconnect on their next
// use. If it cannot (it died more than maxRestarts times within
// restartWindow, or will not start), the supervisor says so and exits:
// Lost is closed. Either way the supervisor's words reach Notify.

// Notify sets a function that is called, from another goroutine, with each
// sentence the embedded server's supervisor says on its own: that
// PostgreSQL died and was started again, or could not be. Nothing is ever
// said for an external server.
func (s *Server) Notify(f func(string)) {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.notify = f
}

// Lost is closed once the embedded server is gone without Close having
// been called: its PostgreSQL died and could not be started again
// (LostReason says why). Never closed for an external server.
func (s *Server) Lost() <-chan struct{} {
	if !s.embedded {
		return nil
	}
	return s.lost
}

// LostReason says why Lost was closed. Whoever asks reports it: Close
// then does not return it as an error again.
func (s *Server) LostReason() string {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.lostReported = true
	if s.lostMsg == "" {
		return "the embedded PostgreSQL's supervisor exited: " + strings.TrimSpace(s.stderr.String())
	}
	return s.lostMsg
}

// PostmasterPID is the embedded server's postmaster's process id (it
// changes when the server is restarted); 0 for an external server.
func (s *Server) PostmasterPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.postPID
}

// event handles a line the supervisor wrote on its own.
func (s *Server) event(ev string) {
	kind, msg, _ := strings.Cut(ev, " ")
	switch kind {
	case eventRestarted:
		pidText, rest, _ := strings.Cut(msg, " ")
		var pid int
		fmt.Sscanf(pidText, "%d", &pid)
		msg = rest
		s.mu.Lock()
		s.postPID = pid
		s.mu.Unlock()
		// The admin connections died with the server: a later Drop must
		// not be handed a dead one.
		s.closeIdleAdmin()
	case eventLost:
		s.evMu.Lock()
		s.lostMsg = msg
		s.evMu.Unlock()
	}
	s.evMu.Lock()
	f := s.notify
	s.evMu.Unlock()
	if f != nil {
		f(msg)
	}
}
