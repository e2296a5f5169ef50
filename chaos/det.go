package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of a deterministic run that cannot be one.
var (
	ErrDeterministicHTTP     = errors.New("a deterministic run cannot go over HTTP: the sockets, the proxies and the HTTP servers' goroutines are not scheduled")
	ErrDeterministicKill     = errors.New("a deterministic run cannot kill PostgreSQL: when a SIGKILL lands, and what the restarted server still has, depend on real time")
	ErrDeterministicFailover = errors.New("a deterministic run cannot fail over: the primary's death, the standby's promotion and how far the standby had got depend on real time, and a commit waiting for a synchronous standby is a wait no scheduler sees")
	ErrDeterministicDuration = errors.New("a deterministic run needs a number of intents: a run of a duration depends on real time")
	ErrDeterministicPool     = errors.New("a deterministic run needs a *pgxpool.Pool, to give each task a connection whose backend it knows")
)

// Determinism is what a deterministic run adds to its history.
type Determinism struct {
	// Steps is how many choices the scheduler made. Every *Ns offset of a
	// deterministic history counts steps, not nanoseconds.
	Steps int `json:"steps"`
	// Schedule is the SHA-256 of every choice (step, the moment, the task,
	// its step): two runs that chose alike have the same.
	Schedule string `json:"schedule"`
}

// Validate refuses a config that cannot run as asked.
func (c Config) Validate() error {
	switch c.Failover {
	case "", ReplicationAsync, ReplicationSync:
	default:
		return fmt.Errorf("unknown replication %q for a failover (%s or %s)", c.Failover, ReplicationAsync, ReplicationSync)
	}
	if !c.Deterministic {
		return nil
	}
	switch {
	case c.Partition != nil:
		return errors.New("a deterministic run cannot be partitioned: when a cut lands depends on real time")
	case c.Failover != "":
		return ErrDeterministicFailover
	case c.HTTP:
		return ErrDeterministicHTTP
	case c.KillPostgres:
		return ErrDeterministicKill
	case c.Intents <= 0 && c.Script == nil:
		return ErrDeterministicDuration
	}
	if c.Interleaving != nil {
		switch c.Interleaving.Policy {
		case "", PolicyRandom, PolicyDefault:
		default:
			return fmt.Errorf("unknown scheduling policy %q (random or default)", c.Interleaving.Policy)
		}
	}
	if c.Script != nil {
		return c.Script.Validate(c.WithDefaults().Instances)
	}
	return nil
}

// schedStats is what a deterministic run's scheduler asked PostgreSQL
// about locks (Polls), the statements it cancelled for one (Cancels), and
// the waits its model of row locks saw coming, unsent (Predicted).
type schedStats struct{ Polls, Cancels, Predicted int64 }

// runDeterministic is RunWith for Config.Deterministic.
func runDeterministic(ctx context.Context, db bank.DB, cfg Config, opts Options) (*History, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return nil, ErrDeterministicPool
	}
	started := time.Now()
	poll, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer poll.Release()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s := newSched(cfg.Seed, cfg.Interleaving, poll, opts.Decisions)
	s.stop = stop
	s.noLockModel = opts.noLockModel
	e := newEngineOn(newSchedDB(pool, s), cfg, s)
	tctx := s.adopt(runCtx)
	h, runErr := func() (*History, error) {
		if err := e.open(tctx); err != nil {
			return nil, err
		}
		return e.run(tctx, opts.Progress)
	}()
	if err := s.close(tctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if runErr != nil {
		return nil, runErr
	}
	steps, digest := s.summary()
	if opts.stats != nil {
		*opts.stats = schedStats{Polls: s.polls.Load(), Cancels: s.cancels.Load(), Predicted: s.predicted.Load()}
	}
	h.Deterministic = &Determinism{Steps: steps, Schedule: digest}
	h.Duration, h.Wall = 0, time.Since(started)
	if schedDebug {
		fmt.Fprintf(os.Stderr, "deterministic run: %d steps, %d polls, %d cancels, %d waits predicted, %s\n", steps, s.polls.Load(), s.cancels.Load(), s.predicted.Load(), h.Wall)
	}
	return h, nil
}

// Bytes is the history as Save writes it.
func (h *History) Bytes() ([]byte, error) { return json.Marshal(h) }

// Hash is the SHA-256 of the history as Save writes it: two deterministic
// runs of one seed and config have the same, on any machine.
func (h *History) Hash() (string, error) {
	b, err := h.Bytes()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Seed is a seed in JSON: a string, because JSON numbers above 2^53 are
// rounded by JavaScript and jq, and a rounded seed is another run. It reads
// a number too, as histories saved before it wrote them.
type Seed uint64

// MarshalJSON implements json.Marshaler.
func (s Seed) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatUint(uint64(s), 10))
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *Seed) UnmarshalJSON(b []byte) error {
	var str string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
	} else {
		str = string(b)
	}
	v, err := strconv.ParseUint(str, 10, 64)
	if err != nil {
		return fmt.Errorf("seed %s: %w", b, err)
	}
	*s = Seed(v)
	return nil
}

// configJSON is Config as JSON, its seed a string.
type configJSON Config

// MarshalJSON implements json.Marshaler: the seed is written as a string.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		configJSON
		Seed Seed `json:"seed"`
	}{configJSON(c), Seed(c.Seed)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Config) UnmarshalJSON(b []byte) error {
	v := struct {
		*configJSON
		Seed Seed `json:"seed"`
	}{configJSON: (*configJSON)(c)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	c.Seed = uint64(v.Seed)
	return nil
}

type historyJSON History

// MarshalJSON implements json.Marshaler: the seed is written as a string.
func (h *History) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		*historyJSON
		Seed Seed `json:"seed"`
	}{(*historyJSON)(h), Seed(h.Seed)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *History) UnmarshalJSON(b []byte) error {
	v := struct {
		*historyJSON
		Seed Seed `json:"seed"`
	}{historyJSON: (*historyJSON)(h)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	h.Seed = uint64(v.Seed)
	return nil
}
