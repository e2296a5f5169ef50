package api_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/idem"
	"github.com/jackc/pgx/v5/pgxpool"
)

// framedServer serves the API as bank-sim serve does (api.Serve's listener
// and connection context) on 127.0.0.1, over a fresh bank.
func framedServer(t *testing.T) (addr string, pool *pgxpool.Pool) {
	t.Helper()
	pool = newBank(t, 4)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	srv := httptest.NewUnstartedServer(api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens(), Log: t.Logf}))
	srv.Listener = api.Listener(srv.Listener)
	srv.Config.ConnContext = api.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), pool
}

// rawPost is a POST /transfers as bytes, with extra header lines, a
// framing (its Content-Length/Transfer-Encoding lines) and the body as
// framed.
func rawPost(key, extra, framing, body string) string {
	return "POST /transfers HTTP/1.1\r\nHost: bank\r\nAuthorization: Bearer token-ada\r\nIdempotency-Key: " + key + "\r\n" +
		extra + framing + "\r\n" + body
}

const smuggledBody = `{"from":11,"to":21,"amountKobo":1000}` // Ada's account 11 to Bola's 21

func contentLength(body string) string { return fmt.Sprintf("Content-Length: %d\r\n", len(body)) }

func chunked(body string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body) }

// exchange writes raw on one connection and reads every answer until the
// server closes it (bounded: 10 s without a byte means it hung). The last
// request raw has asks for the close itself.
func exchange(t *testing.T, addr, raw string) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.Peek(1); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return out // closed by the server
		}
		res, err := http.ReadResponse(br, nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("waited 10 s for an answer or the close after %d answer(s)", len(out))
		}
		if err != nil {
			t.Fatalf("reading answer %d: %v (after %d bytes of answers)", len(out)+1, err, br.Buffered())
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(strings.NewReader(string(b)))
		out = append(out, res)
	}
}

// Issue 19, defect 7: a request framed two ways (Content-Length and
// Transfer-Encoding; Content-Length twice) or carrying a header twice is
// refused with 400 in the API's problem shape, and its connection is
// closed, so that the request smuggled after it on the same connection
// never runs: no answer, no key, no transfer.
func TestAmbiguousFramingIsRefusedAndNothingSmuggledRuns(t *testing.T) {
	t.Parallel()
	addr, pool := framedServer(t)
	// Connection: close ends the exchange after the second request when it
	// runs (the control), with no wait.
	second := rawPost("smuggled-key-0000000002", "Content-Type: application/json\r\nConnection: close\r\n", contentLength(smuggledBody), smuggledBody)
	cases := []struct {
		name, first, code string
	}{
		{"Content-Length and Transfer-Encoding",
			rawPost("smuggle-key-0000000001", "Content-Type: application/json\r\n",
				fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(chunked(smuggledBody))+len(second)), chunked(smuggledBody)),
			api.CodeAmbiguousFraming},
		{"Transfer-Encoding and Content-Length",
			rawPost("smuggle-key-0000000003", "Content-Type: application/json\r\n",
				fmt.Sprintf("transfer-encoding: chunked\r\ncontent-length: %d\r\n", len(chunked(smuggledBody))), chunked(smuggledBody)),
			api.CodeAmbiguousFraming},
		{"Content-Length twice",
			rawPost("smuggle-key-0000000004", "Content-Type: application/json\r\n", contentLength(smuggledBody)+contentLength(smuggledBody), smuggledBody),
			api.CodeAmbiguousFraming},
		{"Content-Type twice",
			rawPost("smuggle-key-0000000005", "Content-Type: application/json\r\nContent-Type: text/plain\r\n", contentLength(smuggledBody), smuggledBody),
			api.CodeDuplicate},
		{"Idempotency-Key twice",
			rawPost("smuggle-key-0000000006", "Idempotency-Key: smuggle-key-0000000007\r\nContent-Type: application/json\r\n", contentLength(smuggledBody), smuggledBody),
			api.CodeDuplicate},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // each waits for the server's close
				answers := exchange(t, addr, tc.first+second)
				if len(answers) != 1 {
					t.Fatalf("%d answers on the connection, want 1 (the refusal; the smuggled request must not run)", len(answers))
				}
				a := answers[0]
				var p api.Problem
				_ = json.NewDecoder(a.Body).Decode(&p)
				if a.StatusCode != 400 || a.Header.Get("Content-Type") != api.ProblemType || p.Code != tc.code || !a.Close {
					t.Errorf("%d %s %+v (close %v), want 400 %s and the connection closed", a.StatusCode, a.Header.Get("Content-Type"), p, a.Close, tc.code)
				}
			})
		}
	})
	if keys, transfers := counts(t, pool); keys != 0 || transfers != 0 {
		t.Errorf("the refused and smuggled requests wrote %d keys and %d transfers", keys, transfers)
	}
	// The control: the same two requests, each framed one way, both run on
	// one connection.
	if answers := exchange(t, addr, rawPost("plain-key-0000000001", "Content-Type: application/json\r\n", "Transfer-Encoding: chunked\r\n", chunked(smuggledBody))+second); len(answers) != 2 || answers[0].StatusCode != 201 || answers[1].StatusCode != 201 {
		t.Errorf("two well-framed requests on one connection: %d answers, want two 201s", len(answers))
	}
}
