//go:build !linux

package main

import "syscall"

// procAttr puts a redis-server in a process group of its own, so that it
// is killed as a whole.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
