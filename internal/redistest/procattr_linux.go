package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the test process dies,
// so that a test that panics leaves no redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
