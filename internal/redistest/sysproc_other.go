//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux: Stop and the
// tb.Cleanup hooks are the only way servers get killed there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
