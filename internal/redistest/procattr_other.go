//go:build !linux

package redistest

import "os/exec"

// dieWithParent is a no-op where the kernel offers no parent-death signal;
// Stop still ends the server when the test ends normally.
func dieWithParent(*exec.Cmd) {}
