package redistest

import "syscall"

// sysProcAttr has the kernel kill redis-server when the test binary dies,
// even by SIGKILL, so that no server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
