package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// TestDemoCleanup starts the built demo, as `make run` does, and stops it
// each way a user does — Ctrl-C (SIGINT to the foreground process group),
// SIGTERM, closing the terminal (SIGHUP), the reader of its stdout going away
// once it runs (a closed tee) or right after the first line, mid-start
// (`| head -1`) — and checks that PostgreSQL is gone and its files removed.
func TestDemoCleanup(t *testing.T) {
	if _, err := pgcluster.FindBinDir(); err != nil {
		t.Skip(err)
	}
	bin := buildNLProxy(t)
	tests := []struct {
		name      string
		waitReady bool // run until the banner, else stop after the first line
		stop      func(t *testing.T, cmd *exec.Cmd, stdout *os.File)
		reason    string // logged cause of the stop, as os/signal.NotifyContext words it
	}{
		{"SIGINT to the process group", true, signalGroup(syscall.SIGINT), "interrupt signal received"},
		{"SIGTERM", true, signalProcess(syscall.SIGTERM), "terminated signal received"},
		{"SIGHUP to the process group", true, signalGroup(syscall.SIGHUP), "hangup signal received"},
		{"stdout closed while running", true, closeStdout, "stdout closed"},
		{"stdout closed during start", false, closeStdout, "stdout closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmp := worldReadableTempDir(t)
			cmd := exec.Command(bin, "demo", "--listen", "127.0.0.1:0")
			// Nothing listens on port 1: the demo reports Ollama missing at once.
			cmd.Env = append(demoTestEnv(), "TMPDIR="+tmp, "HOME="+tmp, "OLLAMA_HOST=http://127.0.0.1:1", "NLPROXY_LOG_FORMAT=json")
			// Its own process group, like a job in a shell: a signal to the
			// group is what the terminal sends.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr lockedBuffer
			cmd.Stdout, cmd.Stderr = w, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				// Only after a failure is anything left: don't leak it into the run.
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				for _, pid := range processesMentioning(tmp) {
					_ = syscall.Kill(pid, syscall.SIGQUIT) // a postmaster's immediate shutdown
				}
			})

			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(r)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			var dir string
			var postmaster int
			filesIn := regexp.MustCompile(`files in (\S+?)\)?,`)
			for line := range lines {
				if m := filesIn.FindStringSubmatch(line); m != nil {
					dir = m[1]
				}
				if !tt.waitReady || strings.HasPrefix(line, "Press Ctrl-C") {
					break
				}
			}
			if tt.waitReady {
				if dir == "" {
					t.Fatalf("demo never said it was running\nstderr:\n%s", stderr.String())
				}
				if postmaster, err = postmasterPID(dir); err != nil {
					t.Fatal(err)
				}
			}
			tt.stop(t, cmd, r)
			go func() { // keep draining, so no write of the demo blocks on a full pipe
				for range lines {
				}
			}()

			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("demo exit: %v (want status 0 after a requested stop)\nstderr:\n%s", err, stderr.String())
				}
			case <-time.After(3 * time.Minute): // a hang guard, not a speed assertion
				t.Fatalf("demo still running 3 minutes after the stop\nstderr:\n%s", stderr.String())
			}
			if postmaster != 0 {
				if gone, err := pgcluster.Exited(postmaster); err != nil || !gone {
					t.Errorf("postmaster %d still running after the demo exited (%v)", postmaster, err)
				}
			}
			if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
				t.Errorf("left in the demo's TMPDIR: %v (%v)", names(left), err)
			}
			for _, pid := range processesMentioning(tmp) {
				t.Errorf("process %d still uses %s: %s", pid, tmp, cmdline(pid))
			}
			if tt.reason != "" && !strings.Contains(stderr.String(), `"reason":"`+tt.reason+`"`) {
				t.Errorf("log does not give the reason %q:\n%s", tt.reason, stderr.String())
			}
		})
	}
}

func signalGroup(sig syscall.Signal) func(*testing.T, *exec.Cmd, *os.File) {
	return func(t *testing.T, cmd *exec.Cmd, _ *os.File) {
		if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
			t.Fatal(err)
		}
	}
}

func signalProcess(sig syscall.Signal) func(*testing.T, *exec.Cmd, *os.File) {
	return func(t *testing.T, cmd *exec.Cmd, _ *os.File) {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
}

// closeStdout closes the only read end of the demo's stdout, as head or a
// killed tee does.
func closeStdout(t *testing.T, _ *exec.Cmd, r *os.File) {
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// demoTestEnv is the test's environment without NLPROXY_* and OLLAMA_*
// settings a developer may have exported.
func demoTestEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NLPROXY_") && !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return env
}

// worldReadableTempDir is a fresh directory the demo's cluster may live in:
// as root the server runs as "postgres", which must be able to enter it
// (t.TempDir's parent is private to the test's user).
func worldReadableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nlproxy-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func postmasterPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// processesMentioning lists live processes whose command line contains s
// (postgres -D <dir>/data, initdb -D …); Linux only, nil elsewhere.
func processesMentioning(s string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !strings.Contains(cmdline(pid), s) {
			continue
		}
		if gone, err := pgcluster.Exited(pid); err == nil && gone {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

func names(entries []os.DirEntry) []string {
	var n []string
	for _, e := range entries {
		n = append(n, e.Name())
	}
	return n
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
