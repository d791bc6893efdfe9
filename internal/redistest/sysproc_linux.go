package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL a redis-server child when the test
// binary dies (panic, os.Exit, timeout), so no server outlives its test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
