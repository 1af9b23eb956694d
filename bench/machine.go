package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// cpuModel is the first "model name" of /proc/cpuinfo, or GOARCH where
// there is none.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return runtime.GOARCH
}

// machineLine describes the machine, the Go toolchain and redis-server for
// the table's header.
func machineLine(redisServerBin string) string {
	return fmt.Sprintf("GOMAXPROCS=%d, NumCPU=%d, CPU %q, %s %s/%s, redis-server %s",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), cpuModel(), runtime.Version(),
		runtime.GOOS, runtime.GOARCH, redisVersion(redisServerBin))
}
