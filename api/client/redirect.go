package client

import (
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// NewHTTP returns the http.Client bank-sim talks to a server with: every
// request bounded by timeout, over rt (http.DefaultTransport when nil), and
// no redirect ever followed. A redirect would carry the request's
// credentials, idempotency key and body to whatever address the server
// names, past the loopback guard that checked only the first one (chaos
// --target, probe and send move money through a server the user chose, not
// through one that server chose).
func NewHTTP(timeout time.Duration, rt http.RoundTripper) *http.Client {
	return &http.Client{Timeout: timeout, Transport: rt, CheckRedirect: RefuseRedirect}
}

// RefuseRedirect is an http.Client's CheckRedirect that follows nothing: it
// returns a *RedirectError, before any connection to the new address.
func RefuseRedirect(req *http.Request, via []*http.Request) error {
	e := &RedirectError{To: req.URL.String()}
	if len(via) > 0 {
		e.From = via[len(via)-1].URL.String()
	}
	if req.Response != nil {
		e.Status = req.Response.StatusCode
	}
	return e
}

// RedirectError is a server that answered a redirect (3xx with a Location),
// which bank-sim refused to follow.
type RedirectError struct {
	Status int    // the redirect's status, 307 say
	From   string // the URL that answered it
	To     string // where it pointed
}

// Redirect returns the RedirectError for an answer, or nil when it is not a
// redirect: a 3xx with a Location. from is the URL that answered; a
// relative Location is resolved against it.
func Redirect(status int, h http.Header, from string) *RedirectError {
	loc := h.Get("Location")
	if status < 300 || status > 399 || loc == "" {
		return nil
	}
	if base, err := url.Parse(from); err == nil {
		if u, err := base.Parse(loc); err == nil {
			loc = u.String()
		}
	}
	return &RedirectError{Status: status, From: from, To: loc}
}

// Host is the host the redirect pointed to (host:port), or the Location as
// it was when it is not a URL.
func (e *RedirectError) Host() string {
	if u, err := url.Parse(e.To); err == nil && u.Host != "" {
		return u.Host
	}
	return e.To
}

func (e *RedirectError) Error() string {
	what := "the target"
	if e.From != "" {
		what = e.From
	}
	return fmt.Sprintf("%s answered %d redirecting to %s (%s); bank-sim does not follow redirects: it would send the token, the idempotency key and the body to an address you did not give. Give the address that answers itself",
		what, e.Status, e.Host(), e.To)
}
