package main

import "syscall"

// currentThread identifies the calling C thread: during a call from C the goroutine runs locked to
// it, and CUDA's current context is per thread.
func currentThread() int { return syscall.Gettid() }
