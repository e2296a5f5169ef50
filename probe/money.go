package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/api/client"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Balances is a way to read the accounts' balances from outside the
// transfer endpoint. With one, the probe checks money exactly, before and
// after each check: the total is conserved and every account moved by
// exactly what the acknowledged transfers say. chaos --target can read its
// audits through the same interface.
type Balances interface {
	// Read returns the balance of each account in ids.
	Read(ctx context.Context, ids []ID) (map[ID]int64, error)
	// Describe says where the balances come from, for the report.
	Describe() string
	// Close releases what the source holds.
	Close() error
}

// BalanceError is a source that answered, but not with balances: the probe
// was configured wrongly (a usage error), unlike a source that could not be
// reached at all.
type BalanceError struct{ Msg string }

func (e *BalanceError) Error() string { return e.Msg }

// HTTPBalances reads each account with a GET, as its owner: the URL is
// Template with {id} replaced, and the balance is the member Field of the
// JSON answer.
type HTTPBalances struct {
	Template string
	Field    string
	// Owner gives the user whose credentials read an account.
	Owner   func(ID) (User, bool)
	Auth    Contract // for AuthHeader and AuthScheme
	Timeout time.Duration
}

// Describe implements Balances.
func (b *HTTPBalances) Describe() string {
	return fmt.Sprintf("GET %s (member %s), as each account's owner", b.Template, b.Field)
}

// Close implements Balances.
func (b *HTTPBalances) Close() error { return nil }

// Read implements Balances. The reads are one after another, not one
// snapshot: the probe only reads when none of its requests is in flight.
func (b *HTTPBalances) Read(ctx context.Context, ids []ID) (map[ID]int64, error) {
	out := map[ID]int64{}
	for _, id := range ids {
		u, ok := b.Owner(id)
		if !ok {
			continue // no credentials for this account; it is not read
		}
		raw := strings.ReplaceAll(b.Template, "{id}", url.PathEscape(string(id)))
		ep, err := parseEndpoint(raw)
		if err != nil {
			return nil, &BalanceError{fmt.Sprintf("--balances-url: %v", err)}
		}
		pu, _ := url.Parse(raw)
		h := http.Header{}
		h.Set(b.Auth.AuthHeader, b.Auth.authValue(u.Token))
		h.Set("Accept", "application/json")
		status, header, body, err := roundTrip(ctx, wireRequest{Method: "GET", Addr: ep.Addr, Host: ep.Host, Target: pu.RequestURI(), Header: h}, b.Timeout)
		if err != nil {
			return nil, &UnreachableError{fmt.Sprintf("GET %s: %s", raw, explain(err))}
		}
		if re := client.Redirect(status, header, raw); re != nil {
			return nil, &BalanceError{re.Error()}
		}
		if status != 200 {
			return nil, &BalanceError{fmt.Sprintf("GET %s as %s answered %d, not 200 with the balance: %s", raw, u.Name, status, snippet(body))}
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, &BalanceError{fmt.Sprintf("GET %s: the answer is not JSON: %s", raw, snippet(body))}
		}
		v, found := lookup(doc, b.Field)
		n, isInt := integer(v)
		if !found || !isInt {
			return nil, &BalanceError{fmt.Sprintf("GET %s: no whole-number member %q in %s (name it with --balances-field)", raw, b.Field, snippet(body))}
		}
		out[id] = n
	}
	return out, nil
}

// SQLBalances reads the balances from the target's own database with Query,
// which returns two columns: the account id and its balance in the smallest
// unit. The query runs in a READ ONLY, REPEATABLE READ transaction (one
// snapshot, and nothing it does can be written), with a statement timeout.
type SQLBalances struct {
	URL     string
	Query   string
	Timeout time.Duration

	mu   sync.Mutex
	conn *pgx.Conn
}

// Consistent reports that Read sees every account in one snapshot (one
// REPEATABLE READ transaction), so a read while transfers run still sees a
// total that a correct target conserves; HTTPBalances' reads, one GET after
// another, do not.
func (b *SQLBalances) Consistent() bool { return true }

// Describe implements Balances.
func (b *SQLBalances) Describe() string {
	host := "the database"
	if cfg, err := pgx.ParseConfig(b.URL); err == nil {
		host = fmt.Sprintf("database %s on %s:%d", cfg.Database, cfg.Host, cfg.Port)
	}
	return fmt.Sprintf("%s, read only: %s", host, b.Query)
}

// Close implements Balances.
func (b *SQLBalances) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := b.conn.Close(ctx)
	b.conn = nil
	return err
}

// Read implements Balances.
func (b *SQLBalances) Read(ctx context.Context, ids []ID) (map[ID]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, b.Timeout+time.Second)
	defer cancel()
	if b.conn == nil {
		cfg, err := pgx.ParseConfig(b.URL)
		if err != nil {
			return nil, &BalanceError{fmt.Sprintf("--database-url: %v", err)}
		}
		if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > b.Timeout {
			cfg.ConnectTimeout = b.Timeout
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				// The server answered: wrong credentials or database.
				return nil, &BalanceError{fmt.Sprintf("--database-url: %s (SQLSTATE %s)", pe.Message, pe.Code)}
			}
			return nil, &UnreachableError{fmt.Sprintf("--database-url: cannot connect: %v", err)}
		}
		b.conn = conn
	}
	out := map[ID]int64{}
	err := pgx.BeginTxFunc(ctx, b.conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", b.Timeout.Milliseconds())); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, b.Query, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		defer rows.Close()
		if n := len(rows.FieldDescriptions()); n != 2 {
			return &BalanceError{fmt.Sprintf("--balances-sql returns %d columns; it must return two: the account id and its balance", n)}
		}
		want := map[string]ID{}
		for _, id := range ids {
			want[string(id)] = id
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			id, ok := want[fmt.Sprint(vals[0])]
			if !ok {
				continue
			}
			n, ok := sqlInteger(vals[1])
			if !ok {
				return &BalanceError{fmt.Sprintf("--balances-sql: the balance of account %s is %v (%T), not a whole number", id, vals[1], vals[1])}
			}
			out[id] = n
		}
		return rows.Err()
	})
	if err != nil {
		var be *BalanceError
		var pe *pgconn.PgError
		if errors.As(err, &be) {
			return nil, be
		}
		if errors.As(err, &pe) {
			return nil, &BalanceError{fmt.Sprintf("--balances-sql: %s (SQLSTATE %s)", pe.Message, pe.Code)}
		}
		// The connection may be broken; the next read opens another.
		_ = b.conn.Close(context.Background())
		b.conn = nil
		return nil, &UnreachableError{fmt.Sprintf("--database-url: %v", err)}
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			return nil, &BalanceError{fmt.Sprintf("--balances-sql returned no row for account %s", id)}
		}
	}
	return out, nil
}

// sqlInteger reads a balance from whatever integer-like type the query
// returns; a numeric with a fraction is refused, never rounded.
func sqlInteger(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case pgtype.Numeric:
		text, err := v.MarshalJSON()
		if err != nil {
			return 0, false
		}
		// A whole number may be written with zero decimals ("4990000.00"); a
		// fraction is refused, never rounded.
		whole, frac, _ := strings.Cut(strings.Trim(string(text), `"`), ".")
		if strings.Trim(frac, "0") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(whole, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// unreachable reports whether err is a failure to reach a source at all,
// rather than an answer the probe could not use.
func unreachable(err error) bool {
	var ue *UnreachableError
	return errors.As(err, &ue)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
