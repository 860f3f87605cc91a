package main

// nvidia-persistenced: the daemon that keeps the GPUs initialised; nvidia-smi shows Persistence-M On while its pid
// file names a live process (machine.PersistencedRunning). It forks like the real daemon (its unit is Type=forking
// with a pid file) and fails to start the way the real one does when NVML cannot initialise (no driver,
// library/module version mismatch).

import (
	"fmt"
	"os"
	"slices"

	"gpuready.lab/silicon/machine"
)

const persistencedName = "nvidia-persistenced"

// persistencedFlags are the real daemon's options without an argument; --user/-u and --group/-g take one.
var persistencedFlags = []string{"--verbose", "-V", "--no-persistence-mode", "--persistence-mode", "--no-unbind",
	"--foreground", "-f"}

func persistenced(args []string) int {
	args, daemon := isDaemon(args)
	if slices.Contains(args, "--version") || slices.Contains(args, "-v") {
		fmt.Printf("nvidia-persistenced:  version %s\n\n", machine.LibraryVersion())
		return 0
	}
	for i := 0; i < len(args); i++ {
		switch {
		case slices.Contains([]string{"--user", "-u", "--group", "-g"}, args[i]):
			i++
		case !slices.Contains(persistencedFlags, args[i]):
			fmt.Fprintf(os.Stderr, "nvidia-persistenced: invalid option -- '%s'\n", args[i])
			return 1
		}
	}
	pidFile := absPath(machine.PersistencedPidFile())
	log := openSysLog(persistencedName)
	m := startDaemon(log, "nvidia-persistenced failed to initialize. Check syslog for more details.")
	if m == nil {
		return 1
	}
	foreground := slices.Contains(args, "--foreground") || slices.Contains(args, "-f")
	if !foreground && !daemon {
		return forkDaemon(persistencedName, pidFile, args)
	}
	return serveDaemon(pidFile, daemon,
		func(err error) { log.err(fmt.Sprintf("Failed to write the pid file %s: %v", pidFile, err)) },
		func() {
			log.notice(fmt.Sprintf("Started (%d)", os.Getpid()))
			for _, g := range m.GPUs() {
				if !m.OffBus(g.Index) {
					log.notice(fmt.Sprintf("device %s - registered", g.PCIBusID[min(4, len(g.PCIBusID)):]))
				}
			}
		},
		func() { log.notice(fmt.Sprintf("Shutdown (%d)", os.Getpid())) })
}
