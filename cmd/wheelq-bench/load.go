package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startLoad runs `stress-ng --cpu n` (Debian's stress-ng: n workers
// spinning on the CPU) until the returned function stops it, so that a
// workload's figures are taken on a machine busy with other work and can
// be reproduced. It waits a moment for the workers to spin up.
//
// With apart, stress-ng runs in a session of its own (setsid). Where
// Linux schedules by autogroup (/proc/sys/kernel/sched_autogroup_enabled
// is 1: each session a group, shares of the CPU split between groups
// first), it is then a group of its own, as another service on a shared
// host is (systemd services and containers have cgroups of their own,
// scheduled the same way). Without apart it shares the bench's session,
// so its workers compete with the bench's threads (and the Redis and
// servers the bench starts) one thread against another: the harder case.
func startLoad(n int, apart bool) (stop func(), err error) {
	bin, err := exec.LookPath("stress-ng")
	if err != nil {
		return nil, fmt.Errorf("%w (apt-get install stress-ng)", err)
	}
	cmd := exec.Command(bin, "--cpu", strconv.Itoa(n), "--quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: !apart, Setsid: apart}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return nil, fmt.Errorf("stress-ng exited at once")
	case <-time.After(500 * time.Millisecond):
	}
	return func() {
		// Its workers are its children: stop the whole process group
		// (a new session is a new process group too).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}, nil
}

// autogroup reports whether Linux schedules by autogroup here ("on",
// "off"), or "" where it cannot tell.
func autogroup() string {
	b, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	switch {
	case err != nil:
		return ""
	case strings.TrimSpace(string(b)) == "0":
		return "off"
	default:
		return "on"
	}
}
