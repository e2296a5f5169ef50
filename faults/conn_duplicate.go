package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

func init() { RegisterConn("duplicate", func() ConnFault { return &DuplicateConn{Copies: 2} }) }

// DuplicateConn sends several copies of the request to the server at the
// same moment, each on its own connection, as a load balancer that retried
// too eagerly does, and passes the first copy's answer on to the client.
type DuplicateConn struct {
	Copies int `json:"copies"`
	// Answered, when set, hears every copy's answer once all have ended
	// (nil for a copy that got none), in the order the copies were sent:
	// what the server told the copies the client never sees.
	Answered func(answers []*CopyAnswer) `json:"-"`
}

// CopyAnswer is the answer one copy of a duplicated request got.
type CopyAnswer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Name implements ConnFault.
func (*DuplicateConn) Name() string { return "duplicate" }

// Exchange implements ConnFault.
func (f *DuplicateConn) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	n := max(f.Copies, 2)
	type result struct {
		status int
		err    error
		answer *CopyAnswer
	}
	copies := make([]*Exchange, n)
	for i := range copies {
		c := *x
		c.Request = x.Request.Clone(ctx)
		copies[i] = &c
	}
	results := make([]result, n)
	first := make(chan struct{})
	var wg sync.WaitGroup
	var firstErr error
	for i, c := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-first
			res, body, err := c.RoundTrip(ctx)
			if err != nil {
				results[i] = result{err: err}
				if i == 0 {
					firstErr = err
				}
				return
			}
			results[i] = result{status: res.StatusCode, answer: &CopyAnswer{Status: res.StatusCode, Header: res.Header, Body: body}}
			if i == 0 {
				firstErr = x.Reply(res, body)
			}
		}()
	}
	close(first)
	wg.Wait()
	statuses := make([]string, n)
	for i, r := range results {
		statuses[i] = fmt.Sprint(r.status)
		if r.err != nil {
			statuses[i] = "no answer"
		}
	}
	x.Note("%d copies reached the server at the same moment; they were answered %v, and the client got the first", n, statuses)
	if f.Answered != nil {
		answers := make([]*CopyAnswer, n)
		for i, r := range results {
			answers[i] = r.answer
		}
		f.Answered(answers)
	}
	if results[0].err != nil {
		_ = x.Drop()
	}
	return firstErr
}
