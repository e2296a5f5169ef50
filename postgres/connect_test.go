package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Issue 19: --database-url at something that is not a PostgreSQL server
// that answers: an HTTP server, a port that accepts and never says a word
// (bounded by the default connect timeout, here made 1 s; a Go web server
// does that too, waiting for a request line), a refused port.
// Each fails, within the timeout, with one message in the user's words:
// which host, what happened, what to check; never pgx's internals, never
// the password, the cause said once. Start and PruneServer alike.
func TestUnreachableServersAreExplained(t *testing.T) {
	t.Parallel()
	defer func(d time.Duration) { DefaultConnectTimeout = d }(DefaultConnectTimeout)
	DefaultConnectTimeout = time.Second

	// Answers what a web server answers to bytes that are not HTTP, at
	// once; pgx read it as a message of 1414811691 bytes ("TTP ").
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	go func() {
		for {
			c, err := web.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n400 Bad Request"))
				io.Copy(io.Discard, c)
			}()
		}
	}()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	}()

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	closed.Close()

	for _, c := range []struct {
		name, addr, want string
	}{
		{"an HTTP server", web.Addr().String(), "the server answered, but it does not speak PostgreSQL's protocol (is this port an HTTP server"},
		{"a port that accepts and says nothing", silent.Addr().String(), "no answer within 1s"},
		{"a refused port", refusedAddr, "connection refused: nothing listens on that port"},
	} {
		url := "postgres://bank:s3cret@" + c.addr + "/mine"
		for _, via := range []string{"Start", "PruneServer"} {
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if via == "Start" {
				var s *Server
				s, err = Start(ctx, Options{URL: url})
				if s != nil {
					s.Close()
				}
			} else {
				_, _, err = PruneServer(ctx, url, true)
			}
			cancel()
			took := time.Since(t0)
			if took > 20*time.Second {
				t.Errorf("%s, %s: took %v; the 1 s connect timeout did not bound it", c.name, via, took)
			}
			if err == nil {
				t.Errorf("%s, %s: no error", c.name, via)
				continue
			}
			msg := err.Error()
			t.Logf("%s, %s (%v): %s", c.name, via, took.Round(time.Millisecond), msg)
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s, %s: %v does not wrap ErrUnavailable", c.name, via, err)
			}
			if !strings.Contains(msg, "could not reach PostgreSQL at "+c.addr+": "+c.want) {
				t.Errorf("%s, %s: %q\nwant it to say: could not reach PostgreSQL at %s: %s", c.name, via, msg, c.addr, c.want)
			}
			if !strings.HasSuffix(msg, "check DATABASE_URL / --database-url") {
				t.Errorf("%s, %s: %q does not end in what to check", c.name, via, msg)
			}
			for _, internal := range []string{"invalid body length", "dial error", "failed to connect to", "s3cret", "context deadline"} {
				if strings.Contains(msg, internal) {
					t.Errorf("%s, %s: %q shows %q", c.name, via, msg, internal)
				}
			}
		}
	}
}

func TestWithConnectTimeout(t *testing.T) {
	defer func(d time.Duration) { DefaultConnectTimeout = d }(DefaultConnectTimeout)
	DefaultConnectTimeout = 10 * time.Second
	t.Setenv("PGCONNECT_TIMEOUT", "")
	for in, want := range map[string]string{
		"postgres://u:p@h:5/db":                               "postgres://u:p@h:5/db?connect_timeout=10",
		"postgres://u:p@h:5/db?sslmode=disable":               "postgres://u:p@h:5/db?connect_timeout=10&sslmode=disable",
		"postgres://u:p@h:5/db?connect_timeout=3":             "postgres://u:p@h:5/db?connect_timeout=3",
		"host=h port=5 dbname=db":                             "host=h port=5 dbname=db connect_timeout=10",
		"host=h connect_timeout = 2 dbname=db":                "host=h connect_timeout = 2 dbname=db",
		"postgresql://h/db?connect_timeout=0&sslmode=require": "postgresql://h/db?connect_timeout=0&sslmode=require",
	} {
		if got := withConnectTimeout(in); got != want {
			t.Errorf("withConnectTimeout(%q) = %q, want %q", in, got, want)
		}
	}
}
