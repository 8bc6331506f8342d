package main

import "syscall"

// procAttr puts a redis-server in a process group of its own (so that it is
// killed as a whole) and asks the kernel to kill it if the harness dies
// without cleaning up.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
