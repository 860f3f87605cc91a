package main

// The MPS control daemon, as NVIDIA's nvidia-cuda-mps-control behaves for its callers: "-d" starts the daemon
// in the background and returns once it listens; "-f" runs it in the foreground; without arguments the tool is
// the daemon's client: each line of standard input is one command, its answer goes to standard output, and
// with no daemon running it says so and fails. The directories come from CUDA_MPS_PIPE_DIRECTORY (default
// /tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps); the daemon appends what it does to
// control.log there, which NVIDIA's MPS control daemon image tails into its pod log.
//
// Emulated: NVIDIA's daemon talks over named pipes in the pipe directory and starts an MPS server per client
// user; this one answers on a Unix socket named "control" in that directory (only this tool connects to it)
// and keeps the settings NVIDIA's images set (active thread percentage, pinned memory limits) without a server:
// the mock CUDA driver runs MPS clients' kernels as it runs any other.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	controlSocket  = "control"
	foregroundFlag = "-f"
	notRunning     = "Cannot find MPS control daemon process"
)

func pipeDir() string { return envOr("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps") }
func logDir() string  { return envOr("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func socketPath() string { return filepath.Join(pipeDir(), controlSocket) }

func mpsControl(args []string) int {
	switch {
	case len(args) == 0:
		return client(os.Stdin, os.Stdout)
	case len(args) == 1 && args[0] == "-d":
		return startBackground()
	case len(args) == 1 && args[0] == foregroundFlag:
		return serve()
	}
	fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: unknown arguments %q (use -d, -f, or commands on stdin)\n", args)
	return 1
}

// running: a daemon answers on the control socket.
func running() bool {
	conn, err := net.DialTimeout("unix", socketPath(), time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func startBackground() int {
	if running() {
		fmt.Println("An instance of this daemon is already running")
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: %v\n", err)
		return 1
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: %v\n", err)
		return 1
	}
	defer null.Close()
	daemon := exec.Command(self)
	// argv[0] names the tool: installed as /usr/bin/nvidia-cuda-mps-control the binary picks it by that name
	daemon.Args = []string{"nvidia-cuda-mps-control", foregroundFlag}
	daemon.Stdin, daemon.Stdout, daemon.Stderr = null, null, null
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this call, as a daemon does
	if err := daemon.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: cannot start the daemon: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if running() {
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: the daemon exited (%v); see %s\n", err,
				filepath.Join(logDir(), "control.log"))
			return 1
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: the daemon did not listen on %s within 10 s\n", socketPath())
	return 1
}

// daemon is the control daemon's settings, as the MPS commands NVIDIA's images send set and read them.
type daemon struct {
	mu            sync.Mutex
	log           *os.File
	threads       string            // default active thread percentage
	pinnedLimits  map[string]string // device -> default pinned device memory limit
	listener      net.Listener
	quitRequested bool
}

func (d *daemon) logf(format string, args ...any) {
	stamp := time.Now().Format("2006-01-02 15:04:05.000")
	fmt.Fprintf(d.log, "[%s] %s\n", stamp, fmt.Sprintf(format, args...))
}

func serve() int {
	for _, dir := range []string{pipeDir(), logDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: %v\n", err)
			return 1
		}
	}
	log, err := os.OpenFile(filepath.Join(logDir(), "control.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: %v\n", err)
		return 1
	}
	defer log.Close()
	if running() {
		fmt.Fprintln(os.Stderr, "An instance of this daemon is already running")
		return 1
	}
	_ = os.Remove(socketPath()) // one left by a daemon that died with its container
	listener, err := net.Listen("unix", socketPath())
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-control: %v\n", err)
		return 1
	}
	d := &daemon{log: log, threads: "100.0", pinnedLimits: map[string]string{}, listener: listener}
	d.logf("Startup")
	for {
		conn, err := listener.Accept()
		if err != nil {
			if d.quitting() {
				d.logf("Exit")
				return 0
			}
			d.logf("accept: %v", err)
			return 1
		}
		go d.handle(conn)
	}
}

func (d *daemon) quitting() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.quitRequested
}

func (d *daemon) handle(conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	_, _ = io.WriteString(conn, d.command(strings.TrimSpace(line)))
}

// command runs one control command and returns its answer (with its newline; "" when it prints nothing).
func (d *daemon) command(line string) string {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "" // a probe: a caller checking that the daemon runs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logf("Cmd:%s", line)
	switch {
	case fields[0] == "get_default_active_thread_percentage" && len(fields) == 1:
		return d.threads + "\n"
	case fields[0] == "set_default_active_thread_percentage" && len(fields) == 2:
		var pct float64
		if _, err := fmt.Sscanf(fields[1], "%g", &pct); err != nil || pct <= 0 || pct > 100 {
			return fmt.Sprintf("Invalid active thread percentage %s\n", fields[1])
		}
		d.threads = fmt.Sprintf("%.1f", pct)
		return d.threads + "\n"
	case fields[0] == "set_default_device_pinned_mem_limit" && len(fields) == 3:
		d.pinnedLimits[fields[1]] = fields[2]
		return ""
	case fields[0] == "get_default_device_pinned_mem_limit" && len(fields) == 2:
		if limit, ok := d.pinnedLimits[fields[1]]; ok {
			return limit + "\n"
		}
		return "0\n"
	case fields[0] == "get_server_list" && len(fields) == 1:
		return "" // no MPS server: the mock CUDA driver runs clients' kernels itself
	case fields[0] == "quit" && len(fields) == 1:
		d.quitRequested = true
		_ = d.listener.Close() // serve's Accept returns; the socket file goes with the listener
		return ""
	}
	known := []string{"get_default_active_thread_percentage", "set_default_active_thread_percentage",
		"set_default_device_pinned_mem_limit", "get_default_device_pinned_mem_limit", "get_server_list", "quit"}
	sort.Strings(known)
	return fmt.Sprintf("Unrecognized command %q (this lab daemon knows %s)\n", line, strings.Join(known, ", "))
}

// client sends each line of in to the daemon and copies the answers to out.
func client(in io.Reader, out io.Writer) int {
	scanner := bufio.NewScanner(in)
	sent := false
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		if code := send(line, out); code != 0 {
			return code
		}
		sent = true
	}
	if !sent && !running() {
		fmt.Fprintln(out, notRunning)
		return 1
	}
	return 0
}

func send(line string, out io.Writer) int {
	conn, err := net.DialTimeout("unix", socketPath(), 5*time.Second)
	if err != nil {
		fmt.Fprintln(out, notRunning)
		return 1
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		fmt.Fprintln(out, notRunning)
		return 1
	}
	_, _ = io.Copy(out, conn)
	return 0
}
