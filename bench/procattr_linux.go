package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child when this process dies, so
// that a crash leaves no redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
