//go:build unix

package redistest

import (
	"os"
	"syscall"
)

func signalStop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func signalCont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
