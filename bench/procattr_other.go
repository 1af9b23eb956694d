//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the kernel cannot kill a child with its
// parent; the program's own signal handler and deferred stop still do.
func dieWithParent(*exec.Cmd) {}
