package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"
)

// speaksHTTP sends ep a plain GET of its base path, without credentials
// (nothing a transfer API acts on), before the probe prints its plan or
// moves any money, and says so when ep is not an HTTP server at all: one
// that closes the connection without a byte (a PostgreSQL port does), or
// answers bytes that are not HTTP (TLS, SSH, a database's protocol). Any
// HTTP answer passes, whatever its status: the preflight judges the API.
func speaksHTTP(ctx context.Context, ep endpoint, timeout time.Duration) error {
	start := time.Now()
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", ep.Addr)
	if err != nil {
		return &UnreachableError{fmt.Sprintf("cannot reach %s: %s. Is the server running, and is this its address?", ep.URL, explain(err))}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	req := "GET " + ep.Prefix + "/ HTTP/1.1\r\nHost: " + ep.Host + "\r\nUser-Agent: bank-sim-probe\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
	_, werr := io.WriteString(conn, req)
	buf := make([]byte, 16)
	n := 0
	if werr == nil {
		n, err = io.ReadAtLeast(conn, buf, len("HTTP/"))
	} else {
		err = werr
	}
	got := buf[:n]
	after := time.Since(start).Round(time.Millisecond)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case bytes.HasPrefix(got, []byte("HTTP/")):
		return nil
	case n > 0 && !bytes.HasPrefix([]byte("HTTP/"), got):
		hint := ""
		if got[0] == 0x15 || got[0] == 0x16 {
			hint = " (they look like TLS: give the server's plain-HTTP address)"
		}
		return &UnreachableError{fmt.Sprintf("%s is not an HTTP server: it answered a plain GET with bytes that are not HTTP, %q%s. Is this the transfer API's address?", ep.URL, got, hint)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &UnreachableError{fmt.Sprintf("%s accepted the connection but gave no answer in time to a plain GET (waited %s): is it an HTTP server, and is it stuck?", ep.URL, timeout)}
	case n > 0:
		return &UnreachableError{fmt.Sprintf("%s closed the connection after %q, in the middle of an HTTP answer to a plain GET (after %s)", ep.URL, got, after)}
	}
	return &UnreachableError{fmt.Sprintf("%s is not an HTTP server: it closed the connection without answering a plain GET (%s, after %s). Is this the transfer API's address?", ep.URL, explain(err), after)}
}

// htmlPage reports whether a is a web page rather than an API's answer.
func htmlPage(a *Answer) bool {
	if strings.Contains(strings.ToLower(a.Header.Get("Content-Type")), "text/html") {
		return true
	}
	head := strings.ToLower(strings.TrimSpace(string(a.Body[:min(len(a.Body), 64)])))
	return strings.HasPrefix(head, "<!doctype html") || strings.HasPrefix(head, "<html")
}

var (
	htmlTitle = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)
	htmlTag   = regexp.MustCompile(`(?s)<[^>]*>`)
)

// pageExcerpt is a page in a few words instead of its HTML: its title, or
// the start of its text, on one line.
func pageExcerpt(body []byte) string {
	text := string(body)
	if m := htmlTitle.FindStringSubmatch(text); m != nil && strings.TrimSpace(m[1]) != "" {
		text = m[1]
	} else {
		text = htmlTag.ReplaceAllString(text, " ")
	}
	text = strings.Join(strings.Fields(text), " ")
	if r := []rune(text); len(r) > 60 {
		text = string(r[:60]) + "…"
	}
	if text == "" {
		return "a page with no text"
	}
	return fmt.Sprintf("%q", text)
}
