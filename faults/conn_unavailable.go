package faults

import "context"

func init() {
	RegisterConn("unavailable", func() ConnFault { return &Unavailable{RetryAfter: 1} })
}

// Unavailable answers 503 from the middle, as an overloaded load balancer
// does, without passing the request on. RetryAfter (seconds) is sent as
// Retry-After when above zero.
type Unavailable struct {
	RetryAfter int `json:"retryAfter"`
}

// Name implements ConnFault.
func (*Unavailable) Name() string { return "unavailable" }

// Exchange implements ConnFault.
func (f *Unavailable) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	x.Note("the load balancer answered 503 itself; the server never saw the request")
	return x.Answer(503, "unavailable", "The service is overloaded; retry later", f.RetryAfter)
}
