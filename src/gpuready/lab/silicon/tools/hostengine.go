package main

// nv-hostengine: DCGM's host engine, the daemon dcgmi connects to (nvidia-dcgm.service), installed by the emulated
// datacenter-gpu-manager-4-core. It starts the way the real one does only where NVML initialises (a loaded driver
// of the library's version: after a driver change it fails until the reboot), writes its pid file, and then waits;
// it serves nothing: the emulated dcgmi computes its answers from the machine itself. -n keeps it in the foreground
// (the unit's way), otherwise it forks; -t stops a running one; --version prints DCGM's version. Other options of
// the real daemon (-p, --service-account, -f...) are accepted with their argument and ignored.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

const hostEngineName = "nv-hostengine" // its version is dcgmi's dcgmVersion: one DCGM package

var (
	hostEngineWithArgument = []string{"-p", "--port", "-d", "--domain-socket", "-f", "--log-filename", "--log-level",
		"--pid", "--service-account", "-b", "--bind-interface"}
	hostEngineFlags = []string{"-n", "--no-daemon", "-t", "--term", "-v", "--version", "--denylist-modules"}
)

func hostEngine(args []string) int {
	args, daemon := isDaemon(args)
	pidFile := os.Getenv("GPUREADY_LAB_HOSTENGINE_PID")
	if _, set := os.LookupEnv("GPUREADY_LAB_HOSTENGINE_PID"); !set {
		pidFile = "/run/nvidia-hostengine.pid"
	}
	for i := 0; i < len(args); i++ {
		switch arg := args[i]; {
		case slices.Contains(hostEngineWithArgument, arg):
			if arg == "--pid" && i+1 < len(args) {
				pidFile = args[i+1]
			}
			i++
		case !slices.Contains(hostEngineFlags, arg):
			fmt.Fprintf(os.Stderr, "nv-hostengine: unknown option %s\n", arg)
			return 1
		}
	}
	has := func(short, long string) bool { return slices.Contains(args, short) || slices.Contains(args, long) }
	if has("-v", "--version") {
		fmt.Printf("version : %s\n", dcgmVersion)
		return 0
	}
	if has("-t", "--term") {
		return terminateHostEngine(pidFile)
	}
	pidFile = absPath(pidFile)
	log := openSysLog(hostEngineName)
	if startDaemon(log, "Error: DCGM initialization error") == nil {
		return 1
	}
	foreground := has("-n", "--no-daemon")
	if !foreground && !daemon {
		return forkDaemon(hostEngineName, pidFile, args)
	}
	return serveDaemon(pidFile, daemon,
		func(err error) { log.err(fmt.Sprintf("Failed to write the pid file %s: %v", pidFile, err)) },
		func() {
			if foreground {
				fmt.Printf("Started host engine version %s using port number: 5555\n", dcgmVersion)
			}
			log.notice(fmt.Sprintf("Started host engine (%d)", os.Getpid()))
		},
		func() {})
}

// terminateHostEngine is -t: SIGTERM to the pid the pid file names.
func terminateHostEngine(pidFile string) int {
	raw, err := os.ReadFile(pidFile)
	var pid int
	if err == nil {
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	}
	if err == nil {
		err = syscall.Kill(pid, syscall.SIGTERM)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Unable to terminate host engine.")
		return 1
	}
	fmt.Println("Host engine successfully terminated.")
	return 0
}
