package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime/stime in /proc/PID/stat (USER_HZ, 100 on
// every Linux build we run on; sysconf is not reachable without cgo).
const clockTick = 10 * time.Millisecond

// usage is a proxy's resource use, summed over the process and its
// descendants (pgpool-II serves each client in a forked child).
type usage struct {
	CPU      time.Duration // utime + stime, plus that of reaped children
	Switches int64         // voluntary + involuntary context switches of live threads
	Procs    int
}

func (u usage) sub(v usage) usage {
	return usage{CPU: u.CPU - v.CPU, Switches: u.Switches - v.Switches, Procs: u.Procs}
}

// sampleUsage reads /proc for pid and every process below it.
func sampleUsage(pid int) (usage, error) {
	pids, err := processTree(pid)
	if err != nil {
		return usage{}, err
	}
	var u usage
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			if p == pid {
				return usage{}, fmt.Errorf("read stat: %w", err)
			}
			continue // a child that just exited
		}
		ticks, err := parseStatTicks(string(b))
		if err != nil {
			return usage{}, err
		}
		u.CPU += time.Duration(ticks) * clockTick
		u.Switches += taskSwitches(p)
		u.Procs++
	}
	return u, nil
}

// parseStatTicks sums utime, stime, cutime and cstime (fields 14–17) of a
// /proc/PID/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); field k is f[k-3].
	if len(f) < 15 {
		return 0, errors.New("short /proc stat line")
	}
	var sum int64
	for k := 14; k <= 17; k++ {
		n, err := strconv.ParseInt(f[k-3], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse stat field %d: %w", k, err)
		}
		sum += n
	}
	return sum, nil
}

// parseStatPPID returns field 4 of a /proc/PID/stat line.
func parseStatPPID(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, errors.New("short /proc stat line")
	}
	return strconv.Atoi(f[1])
}

// processTree lists pid and all its descendants.
func processTree(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		pp, err := parseStatPPID(string(b))
		if err != nil {
			continue
		}
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}

// taskSwitches sums the context switches of every live thread of pid.
func taskSwitches(pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
			if n, err := parseStatusKB(string(b), f); err == nil {
				sum += n
			}
		}
	}
	return sum
}

// syscallCounter counts the system calls a process tree makes with
// `perf stat -e raw_syscalls:sys_enter` (needs root or perf_event_paranoid ≤ 1).
type syscallCounter struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startSyscallCounter(ctx context.Context, perf string, pid int) (*syscallCounter, error) {
	pids, err := processTree(pid)
	if err != nil {
		return nil, err
	}
	list := make([]string, len(pids))
	for i, p := range pids {
		list[i] = strconv.Itoa(p)
	}
	c := &syscallCounter{}
	c.cmd = exec.CommandContext(ctx, perf, "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", strings.Join(list, ","))
	c.cmd.Stderr = &c.out
	c.cmd.Stdout = &c.out
	c.cmd.WaitDelay = 5 * time.Second
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf: %w", err)
	}
	// perf attaches asynchronously; give it a moment before the workload.
	time.Sleep(200 * time.Millisecond)
	return c, nil
}

// Stop ends counting and returns the number of system calls seen.
func (c *syscallCounter) Stop() (int64, error) {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	_ = c.cmd.Wait()
	return parsePerfCount(c.out.String(), "raw_syscalls:sys_enter")
}

// parsePerfCount finds the count of event in `perf stat -x ,` output.
func parsePerfCount(out, event string) (int64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) >= 3 && f[2] == event {
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("perf count %q: %w", f[0], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("perf output has no %s count: %s", event, tailString(out, 300))
}
