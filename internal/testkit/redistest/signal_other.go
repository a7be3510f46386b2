//go:build !unix

package redistest

import (
	"errors"
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalStop(*os.Process) error { return errors.ErrUnsupported }
func signalCont(*os.Process) error { return errors.ErrUnsupported }
