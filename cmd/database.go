package cmd

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/internal/termtext"
	"github.com/banksim/bank-sim/postgres"
)

// startingSlow is how long PostgreSQL may take to start before bank-sim
// says what it is doing: a warm start takes well under it, a first run's
// cluster creation (initdb) takes a few seconds.
const startingSlow = 2 * time.Second

// startingNote says, on stderr, that PostgreSQL is being started, if that
// takes a while; the returned function ends the note (and wipes it on a
// terminal).
func (a *App) startingNote() (done func()) {
	if a.externalURL() != "" {
		return func() {}
	}
	var mu sync.Mutex
	shown, over := false, false
	t := time.AfterFunc(startingSlow, func() {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return
		}
		shown = true
		msg := "bank-sim: starting PostgreSQL (a first run also creates its cluster; this takes a few seconds)…"
		if a.Env.StderrTerminal {
			fmt.Fprint(a.Env.Stderr, msg)
		} else {
			fmt.Fprintln(a.Env.Stderr, msg)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		over = true
		if shown && a.Env.StderrTerminal {
			fmt.Fprint(termtext.Raw(a.Env.Stderr), "\r\033[K")
		}
	}
}

// describe is the server's one-line description, naming where its URL came
// from: the --database-url flag or DATABASE_URL.
func (a *App) describe(srv *postgres.Server) string {
	d := srv.Describe()
	if a.databaseURL != "" {
		d = strings.ReplaceAll(d, "(DATABASE_URL", "(--database-url")
	}
	return d
}

var refusedPassword = regexp.MustCompile(`password authentication failed for user "[^"]*"`)

// databaseError says why PostgreSQL could not be reached in the user's
// terms. pgx tries TLS first and reports every attempt, so a wrong password
// used to start with "tls error: server refused TLS connection", which is
// only the first of its tries.
func (a *App) databaseError(err error) error {
	msg := err.Error()
	source := a.urlSource()
	if strings.Contains(msg, postgresSource) {
		// The postgres package cannot tell which of the two the URL came from.
		return fmt.Errorf("%w: %s", postgres.ErrUnavailable, strings.ReplaceAll(strings.TrimPrefix(msg, postgres.ErrUnavailable.Error()+": "), postgresSource, source))
	}
	if m := refusedPassword.FindString(msg); m != "" {
		return fmt.Errorf("%w: the PostgreSQL server at %s refused the password (%s); check the user and password in the URL", postgres.ErrUnavailable, source, m)
	}
	if strings.Contains(msg, "tls error: server refused TLS connection; ") {
		msg = regexp.MustCompile(`[^;:]*: tls error: server refused TLS connection; `).ReplaceAllString(msg, "")
		return errors.New(msg)
	}
	return err
}

// postgresSource is how the postgres package names the URL it was given.
const postgresSource = "DATABASE_URL / --database-url"

// urlSource names where the server's URL came from: the --database-url
// flag, or DATABASE_URL.
func (a *App) urlSource() string {
	if a.databaseURL != "" {
		return "--database-url"
	}
	return "DATABASE_URL"
}
