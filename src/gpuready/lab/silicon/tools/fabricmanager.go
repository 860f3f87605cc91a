package main

// nv-fabricmanager: NVIDIA Fabric Manager for NVSwitch systems. It forks like the real one (its unit is
// Type=forking) and writes its log in the real format ("[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message") to the
// log file named in the config (LOG_FILE_NAME; standard error when that is empty). It fails to start on a machine
// without NVSwitches and with a lab fault whose effects include fabric_failed, logging what the real daemon logs
// when its NVSwitch/GPU initialisation fails. While its pid file names a live process (or its lock is held, from a
// GPU container) the fabric counts as Completed (machine.FabricManagerRunning).

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gpuready.lab/silicon/machine"
)

const (
	fabricManagerName = "nv-fabricmanager"
	fabricConfig      = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
	fabricLogDefault  = "/var/log/fabricmanager.log"
	fabricFailed      = "Fabric Manager failed to start. Check /var/log/fabricmanager.log for details."
)

func fabricManager(args []string) int {
	args, daemon := isDaemon(args)
	version := machine.LibraryVersion()
	if slices.Contains(args, "--version") || slices.Contains(args, "-v") {
		fmt.Printf("Fabric Manager version is : %s\n", version)
		return 0
	}
	config := fabricConfig
	if i := slices.Index(args, "-c"); i >= 0 {
		if i+1 == len(args) {
			fmt.Fprintln(os.Stderr, "nv-fabricmanager: option -c needs the config file")
			return 1
		}
		config = args[i+1]
	}
	conf := readFabricConfig(config)
	logFile, ok := conf["LOG_FILE_NAME"]
	if !ok {
		logFile = fabricLogDefault
	}
	log := newFabricLog(logFile)
	pidFile := absPath(machine.FabricManagerPidFile())
	if daemon {
		return fabricDaemon(log, pidFile)
	}
	log.write("INFO", fmt.Sprintf("Fabric Manager version %s is running with the following configuration options", version))
	keys := make([]string, 0, len(conf))
	for key := range conf {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		log.write("INFO", key+" = "+conf[key])
	}
	m, err := openDriver()
	if err != nil {
		log.write("ERROR", "failed to initialize NVML: "+nvmlFailure(err))
		fmt.Fprintln(os.Stderr, fabricFailed)
		return 1
	}
	system := m.Hardware.System
	if !system.NVSwitch {
		log.write("ERROR", "request to query NVSwitch device information from NVSwitch driver failed with "+
			"error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
		log.write("ERROR", "fabric manager failed to open NVSwitch devices, no NVSwitch devices found")
		fmt.Fprintln(os.Stderr, "Fabric Manager failed to start: no NVSwitch devices found.")
		return 1
	}
	if m.HostEffects().FabricFailed {
		log.write("INFO", fmt.Sprintf("number of devices specified in topology file NVSwitches: %d, GPUs: %d",
			system.NVSwitchCount, len(m.GPUs())))
		log.write("ERROR", "detected number of NVSwitches don't match with any supported system topology, "+
			"aborting fabric manager")
		log.write("ERROR", "fabric manager initialization failed")
		fmt.Fprintln(os.Stderr, fabricFailed)
		return 1
	}
	return forkDaemon(fabricManagerName, pidFile, args)
}

// fabricDaemon is the forked daemon: the fabric is up until SIGTERM.
func fabricDaemon(log fabricLog, pidFile string) int {
	m, err := machine.Load()
	if err != nil {
		return 1
	}
	return serveDaemon(pidFile, true,
		func(err error) { log.write("ERROR", fmt.Sprintf("failed to write the pid file %s: %v", pidFile, err)) },
		func() {
			log.write("INFO", fmt.Sprintf("Connected to %d NVSwitch devices and %d GPUs",
				m.Hardware.System.NVSwitchCount, len(m.GPUs())))
			log.write("INFO", "Successfully configured all the available NVSwitches to route GPU NVLink traffic.")
			log.write("INFO", "NVLink training completed successfully. Fabric state: Completed")
		},
		func() { log.write("INFO", "Fabric Manager is exiting") })
}

// readFabricConfig is the config's KEY=VALUE lines (white space around both stripped; '#' comments, blank lines
// and lines without '=' skipped; a later key wins); none when the file cannot be read.
func readFabricConfig(path string) map[string]string {
	conf := map[string]string{}
	raw, err := os.ReadFile(path)
	if err != nil {
		return conf
	}
	text := strings.ReplaceAll(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\r", "\n")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if key, value, ok := strings.Cut(line, "="); ok {
			conf[strings.TrimSpace(key)] = strings.TrimSpace(value)
		}
	}
	return conf
}

// fabricLog is Fabric Manager's log: a file, appended to line by line, or standard error for no file.
type fabricLog struct{ path string }

func newFabricLog(path string) fabricLog {
	if path == "" {
		return fabricLog{}
	}
	path = absPath(path)
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	return fabricLog{path}
}

func (l fabricLog) write(level, message string) {
	line := fmt.Sprintf("[%s] [%s] [tid %d] %s\n", time.Now().Format("Jan 02 2006 15:04:05"), level, os.Getpid(), message)
	if l.path == "" {
		fmt.Fprint(os.Stderr, line)
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}
