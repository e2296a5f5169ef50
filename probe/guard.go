package probe

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"
)

// Loopback reports whether host (a name or an address, without a port)
// names this machine only: every address it resolves to is a loopback one.
// A name that does not resolve is not loopback; the caller says why.
func Loopback(ctx context.Context, host string) (bool, error) {
	if host == "localhost" {
		return true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}

// guard refuses a URL that leaves this machine unless remote targets were
// allowed: the probe moves money, and pointing it at the wrong server by a
// typo must not be enough to do so.
func guard(ctx context.Context, what, raw string, allowRemote bool) error {
	if allowRemote {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return &UsageError{fmt.Sprintf("%s %q is not a URL", what, raw)}
	}
	ok, err := Loopback(ctx, u.Hostname())
	if err != nil {
		return &UnreachableError{fmt.Sprintf("%s %s: cannot resolve %s: %v", what, raw, u.Hostname(), err)}
	}
	if !ok {
		return &UsageError{fmt.Sprintf("%s %s is not on this machine (not a loopback address); the probe moves real money through it. Add --allow-remote if you mean to probe it", what, raw)}
	}
	return nil
}

// UsageError is a command line or configuration the probe cannot run with,
// or a target that does not speak the contract: nothing was judged.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// UnreachableError is a target (or balance source) that could not be
// reached at all: no verdict on it is possible.
type UnreachableError struct{ Msg string }

func (e *UnreachableError) Error() string { return e.Msg }
