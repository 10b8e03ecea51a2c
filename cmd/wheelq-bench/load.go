package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// startLoad runs `stress-ng --cpu n` (Debian's stress-ng: n workers
// spinning on the CPU) until the returned function stops it, so that a
// workload's figures are taken on a machine busy with other work and can
// be reproduced. It waits a moment for the workers to spin up.
func startLoad(n int) (stop func(), err error) {
	bin, err := exec.LookPath("stress-ng")
	if err != nil {
		return nil, fmt.Errorf("%w (apt-get install stress-ng)", err)
	}
	cmd := exec.Command(bin, "--cpu", strconv.Itoa(n), "--quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
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
		// Its workers are its children: stop the whole process group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}, nil
}
