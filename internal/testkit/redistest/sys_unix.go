//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr has nothing to add outside Linux; t.Cleanup kills the server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
