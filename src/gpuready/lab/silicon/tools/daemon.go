package main

// What the emulated driver daemons (nvidia-persistenced, nv-fabricmanager, nv-hostengine) share: NVML must
// initialise before they start; they fork as their Type=forking units expect (the starting process exits 0 only
// once the pid file names the daemon, so systemd finds it at once); the daemon holds an exclusive lock on its pid
// file for its lifetime; and it waits for SIGTERM/SIGINT (stopSignals), then removes its pid file and exits 0.
//
// Why the lock: the lab's GPU containers see a daemon's pid file (bind-mounted, read-only) but not its pid, which
// is in the host's PID namespace; package machine (alive) takes a held lock for a live daemon, as a real driver
// knows Fabric Manager's state in a container too.

import (
	"fmt"
	"log/syslog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gpuready.lab/silicon/machine"
)

// daemonFlag is the first argument of the daemon process forkDaemon starts; the starter's options follow it.
const daemonFlag = "--emulated-daemon"

// isDaemon splits the daemon process's marker off args: true for the process forkDaemon started.
func isDaemon(args []string) ([]string, bool) {
	if len(args) > 0 && args[0] == daemonFlag {
		return args[1:], true
	}
	return args, false
}

// sysLog is a daemon's syslog (facility daemon, tagged with its name and pid); a host without /dev/log (a
// container, a test) loses the messages, as the C library's syslog does.
type sysLog struct{ w *syslog.Writer }

func openSysLog(name string) sysLog {
	w, _ := syslog.New(syslog.LOG_DAEMON|syslog.LOG_NOTICE, name)
	return sysLog{w}
}

func (l sysLog) notice(msg string) {
	if l.w != nil {
		_ = l.w.Notice(msg)
	}
}

func (l sysLog) err(msg string) {
	if l.w != nil {
		_ = l.w.Err(msg)
	}
}

// startDaemon is the start of nvidia-persistenced and nv-hostengine: NVML must initialise, or the daemon logs why
// to syslog, prints failure and exits 1, as NVIDIA's do. The machine to read the GPUs from, or nil.
func startDaemon(log sysLog, failure string) *machine.Machine {
	m, err := openDriver()
	if err != nil {
		log.err("Failed to initialize NVML: " + nvmlFailure(err))
		fmt.Fprintln(os.Stderr, failure)
		return nil
	}
	return m
}

// forkDaemon is the starting process's side of a Type=forking start: it starts this binary again as tool (argv[0]
// names it) with daemonFlag and args, in its own session with stdio on /dev/null, and exits 0 once the pid file
// names that process (holdPidFile writes it under the daemon's lock).
func forkDaemon(tool, pidFile string, args []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", tool, err)
		return 1
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", tool, err)
		return 1
	}
	defer null.Close()
	daemon := exec.Command(self)
	daemon.Args = append([]string{tool, daemonFlag}, args...)
	daemon.Stdin, daemon.Stdout, daemon.Stderr = null, null, null
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := daemon.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot start the daemon: %v\n", tool, err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	want := strconv.Itoa(daemon.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if pid, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(pid)) == want {
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "%s: the daemon exited (%v) before it wrote %s\n", tool, err, pidFile)
			return 1
		case <-time.After(5 * time.Millisecond):
		}
	}
	fmt.Fprintf(os.Stderr, "%s: the daemon wrote no pid file %s within 10 s\n", tool, pidFile)
	return 1
}

// holdPidFile writes this process's pid to pidFile (0644: any user may read it; the lab mounts it into GPU
// containers) with the file's exclusive lock already held, so the file never names the daemon unlocked, and keeps
// the lock for the process's lifetime (the returned file must stay referenced).
func holdPidFile(pidFile string) (*os.File, error) {
	dir := filepath.Dir(pidFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".pid-")
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), pidFile)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		_ = tmp.Close()
		return nil, err
	}
	return tmp, nil
}

// absPath is path from the starter's working directory, which the daemon leaves (daemonStart).
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// daemonStart is the daemon's start, in the process forkDaemon started (child: it leaves the working directory,
// pinning no mount) or in the foreground: it catches the stop signals, then holds its pid file. The file to keep
// and the channel to wait on before removing the pid file; an error when the pid file cannot be written.
func daemonStart(pidFile string, child bool) (*os.File, <-chan os.Signal, error) {
	if child {
		_ = os.Chdir("/")
	}
	stop := stopSignals()
	held, err := holdPidFile(pidFile)
	return held, stop, err
}

// serveDaemon is a daemon's life once it runs (forked, or in the foreground): it holds its pid file (daemonStart),
// then started says so, it waits for a stop signal, stopped says so, and it removes its pid file and exits 0. A pid
// file it cannot write goes to failed, and it exits 1.
func serveDaemon(pidFile string, child bool, failed func(error), started, stopped func()) int {
	held, stop, err := daemonStart(pidFile, child)
	if err != nil {
		failed(err)
		return 1
	}
	defer held.Close()
	started()
	<-stop
	stopped()
	_ = os.Remove(pidFile)
	return 0
}

// stopSignals catches SIGTERM and SIGINT from now on, for the daemon to wait on: taken before the pid file names
// the daemon, so a stop sent as soon as the file appears cleans up rather than killing it with the file left.
func stopSignals() <-chan os.Signal {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	return stop
}
