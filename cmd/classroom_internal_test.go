package cmd

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Issue 29, item 11: the classroom page's server holds at most
// classroomPolls requests for news at once; the ones over the cap are
// answered 503 at once (not held for classroomHold), and the held ones
// still get the next state.
func TestClassroomCapsItsLongPolls(t *testing.T) {
	t.Parallel()
	c, err := startClassroom()
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	// Bounds that mean "hung", far below classroomHold (20 s).
	client := &http.Client{Timeout: 10 * time.Second}
	held := make(chan int, classroomPolls)
	for range classroomPolls {
		go func() {
			res, err := client.Get(c.url + "state?after=0")
			if err != nil {
				held <- -1
				return
			}
			res.Body.Close()
			held <- res.StatusCode
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.mu.Lock()
		n := c.active
		c.mu.Unlock()
		if n == classroomPolls {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %d held requests for news; %d held", classroomPolls, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 3 * classroomPolls {
		res, err := client.Get(c.url + fmt.Sprintf("state?after=%d", i))
		if err != nil {
			t.Fatalf("request %d over the cap: %v (held, not refused at once)", i+1, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d over the cap of %d: %d, want 503 with Retry-After", i+1, classroomPolls, res.StatusCode)
		}
	}
	c.waiting(true) // the next state: every held request gets it
	for range classroomPolls {
		if code := <-held; code != http.StatusOK {
			t.Errorf("a held request for news: %d, want 200 with the next state", code)
		}
	}
	// The last state, fetched: close need not wait for a page.
	c.finish("done", true, "done")
	if res, err := client.Get(c.url + "state?after=0"); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the last state: %v %v", res, err)
	} else {
		res.Body.Close()
	}
}
