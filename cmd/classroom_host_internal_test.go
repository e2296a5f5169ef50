package cmd

import (
	"net"
	"net/http"
	"testing"
)

// The classroom page answers only as its loopback name, on its own port: a
// page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) asks with
// its own host name on the right port, and is refused.
func TestClassroomAnswersOnlyItsLoopbackName(t *testing.T) {
	c, err := startClassroom()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.srv.Close() })
	_, port, _ := net.SplitHostPort(c.ln.Addr().String())
	cases := []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:" + port, "", http.StatusOK},
		{"localhost:" + port, "", http.StatusOK},
		{"127.0.0.1:" + port, "http://127.0.0.1:" + port, http.StatusOK},
		{"evil.example:" + port, "", http.StatusMisdirectedRequest},
		{"evil.example:" + port, "http://evil.example:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1.evil.example:" + port, "", http.StatusMisdirectedRequest},
		{"localhost.:" + port, "", http.StatusMisdirectedRequest},
		{"evil.example", "", http.StatusMisdirectedRequest},
		{"127.0.0.1", "", http.StatusMisdirectedRequest},
		{"127.0.0.1:1" + port, "", http.StatusMisdirectedRequest},
		{"127.0.0.1:" + port, "http://evil.example:" + port, http.StatusForbidden},
	}
	for _, tc := range cases {
		req, err := http.NewRequest("GET", c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %s: %v", tc.host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %s, Origin %q: %d, want %d", tc.host, tc.origin, resp.StatusCode, tc.want)
		}
	}
}
