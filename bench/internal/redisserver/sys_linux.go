//go:build linux

package redisserver

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server if the benchmark process
// dies first (a timeout, a kill), so that no redis-server is left behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
