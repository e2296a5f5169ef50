package zoo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// RestartCommand is a shell command that runs restart the way a team's
// "systemctl restart api" restarts their server, and returns when it is
// done: it asks through one named pipe in dir and waits for the answer on
// another. What restart returns (or "restarted") is the command's output.
// Call stop when done with it.
func RestartCommand(dir string, restart func() error) (cmd string, stop func(), err error) {
	req, ack := filepath.Join(dir, "restart"), filepath.Join(dir, "done")
	for _, p := range []string{req, ack} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return "", nil, err
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			b, err := os.ReadFile(req) // blocks until the command writes
			select {
			case <-done:
				return
			default:
			}
			msg := "restarted"
			if err != nil {
				msg = err.Error()
			} else if err := restart(); err != nil {
				msg = err.Error()
			}
			_ = os.WriteFile(ack, []byte(msg+" ("+strings.TrimSpace(string(b))+")\n"), 0o600)
		}
	}()
	stop = func() {
		close(done)
		// Opening the pipe for writing lets the reader's open return.
		if f, err := os.OpenFile(req, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	}
	return fmt.Sprintf("echo restart > %s && cat %s", req, ack), stop, nil
}
