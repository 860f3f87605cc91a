"""Non-code files of the lab's NVIDIA packages: systemd units, configuration files, maintainer scripts.

Kept as Python strings (not data files) so they ship with gpuready without package-data configuration.
Unit contents follow the units NVIDIA's packages install (nvidia-persistenced's sample unit, the Fabric
Manager unit, the container toolkit's CDI refresh units); the one change is that Fabric Manager does not Require
network-online.target, which a container host never reaches. The toolkit's binaries are NVIDIA's own
(gpuready.lab.nvidia_tools), and so is its runtime config.toml: the postinst has nvidia-ctk write it.
"""

PERSISTENCED_UNIT = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid
Restart=always
ExecStart=/usr/bin/nvidia-persistenced --verbose
ExecStopPost=/bin/rm -rf /run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER_UNIT = """\
[Unit]
Description=NVIDIA fabric manager service
After=network-online.target

[Service]
User=root
PrivateTmp=false
Type=forking
TimeoutStartSec=240
PIDFile=/run/nvidia-fabricmanager/nv-fabricmanager.pid
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER_CFG = """\
# NVIDIA Fabric Manager configuration file.
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=1024
LOG_USE_SYSLOG=0
DAEMONIZE=1
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FABRIC_MODE_RESTART=0
STATE_FILE_NAME=/var/tmp/fabricmanager.state
FM_CMD_BIND_INTERFACE=127.0.0.1
FM_CMD_PORT_NUMBER=6666
FM_STAY_RESIDENT_ON_FAILURES=0
ACCESS_LINK_FAILURE_MODE=0
TRUNK_LINK_FAILURE_MODE=0
NVSWITCH_FAILURE_MODE=0
ABORT_CUDA_JOBS_ON_FM_EXIT=1
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
"""


# datacenter-gpu-manager-4-core's unit (as DCGM 3.x/4.x packages install it, from memory of the package: not
# checked against a 4.5 .deb). The package does not enable it: NVIDIA's install steps end with
# `systemctl --now enable nvidia-dcgm` (gpuready.nvidia.diag_packages), which the node deploy does.
DCGM_UNIT = """\
[Unit]
Description=NVIDIA DCGM service
Conflicts=dcgm.service

[Service]
User=root
PrivateTmp=false
Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""

DAEMON_RELOAD_POSTINST = (
    "#!/bin/sh\nset -e\n"
    'if [ "$1" = "configure" ] && [ -d /run/systemd/system ]; then\n'
    "    systemctl daemon-reload >/dev/null 2>&1 || true\n"
    "fi\nexit 0\n"
)


def postinst_enable(unit: str, start: bool) -> str:
    """Enable (and optionally start) a unit the way deb-systemd-helper/invoke-rc.d scripts do, guarded."""
    start_cmd = f"        systemctl restart {unit} >/dev/null 2>&1 || true\n" if start else ""
    return (
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ]; then\n'
        f"    systemctl enable {unit} >/dev/null 2>&1 || true\n"
        "    if [ -d /run/systemd/system ]; then\n"
        "        systemctl daemon-reload >/dev/null 2>&1 || true\n"
        f"{start_cmd}"
        "    fi\n"
        "fi\nexit 0\n"
    )


def prerm_stop(unit: str) -> str:
    return (
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = "remove" ] && [ -d /run/systemd/system ]; then\n'
        f"    systemctl stop {unit} >/dev/null 2>&1 || true\n"
        "fi\nexit 0\n"
    )


def postrm_disable(unit: str) -> str:
    return (
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = "remove" ] || [ "$1" = "purge" ]; then\n'
        f"    systemctl disable {unit} >/dev/null 2>&1 || true\n"
        "    if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi\n"
        "fi\nexit 0\n"
    )


# nvidia-container-toolkit-base >= 1.18: the CDI refresh pair, as the toolkit's deployments/systemd/ ships them
# (v1.20.0). The .path unit fires when the kernel's module index changes (a driver's DKMS install runs depmod) or
# nvidia-ctk itself is upgraded; the service lists the GPUs (so a driver that does not load fails it, and
# Restart= tries again) and rewrites the spec, also at every boot (/var/run is a tmpfs). Its ExecCondition greps
# modules.dep for nvidia.ko: the lab's nvidia-kernel-open-dkms writes that entry (KMOD_POSTINST).
CDI_REFRESH_PATH = """\
[Unit]
Description=Trigger CDI refresh on NVIDIA driver or toolkit install / upgrade events

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/lib/modules/%v/modules.dep.bin
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
"""

CDI_REFRESH_SERVICE = """\
[Unit]
Description=Refresh NVIDIA CDI specification file
ConditionPathExists=|/usr/bin/nvidia-smi
ConditionPathExists=|/usr/sbin/nvidia-smi
ConditionPathExists=|/usr/lib/wsl/lib/nvidia-smi
ConditionPathExists=/usr/bin/nvidia-ctk
StartLimitBurst=5
StartLimitIntervalSec=10s

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecCondition=/bin/sh -c '/usr/bin/grep -qE "/(nvidia|nvidia-current)[.]ko" /lib/modules/%v/modules.dep || [ -e /dev/dxg ]'
ExecStart=/bin/sh -c '/usr/bin/nvidia-smi -L || /usr/sbin/nvidia-smi -L || /usr/lib/wsl/lib/nvidia-smi -L'
ExecStart=/usr/bin/nvidia-ctk cdi generate
CapabilityBoundingSet=CAP_SYS_MODULE CAP_SYS_ADMIN CAP_MKNOD
Restart=on-failure
RestartSec=1s

[Install]
WantedBy=multi-user.target
"""

# The package's /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env: overrides for the service, none set.
CDI_REFRESH_ENV = """\
# Overrides for `nvidia-ctk cdi generate` as nvidia-cdi-refresh.service runs it: one ENVVAR=value per line
# (see `nvidia-ctk cdi generate --help`), for example
# NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
"""

# The toolkit-base postinst: nvidia-ctk writes /etc/nvidia-container-runtime/config.toml (its defaults, keeping a
# user's settings), as NVIDIA's package does; then what its debhelper part does with the refresh units (enable,
# and start on a system that is up), guarded as in the lab's other packages.
TOOLKIT_BASE_CONFIG = """\
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
fi
"""

TOOLKIT_BASE_UNITS = """\
if [ "$1" = "configure" ] && command -v systemctl >/dev/null 2>&1; then
    systemctl enable nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null 2>&1 || true
    if systemctl --quiet is-system-running 2>/dev/null; then
        systemctl daemon-reload || echo "Warning: Failed to reload systemd daemon" >&2
        systemctl start nvidia-cdi-refresh.path || echo "Warning: Failed to start nvidia-cdi-refresh.path" >&2
        systemctl start nvidia-cdi-refresh.service \\
            || echo "Warning: Failed to start nvidia-cdi-refresh.service" >&2
    fi
fi
"""


def toolkit_base_postinst(refresh_units: bool) -> str:
    """nvidia-container-toolkit-base's postinst: the config file always, the refresh units from 1.18 on."""
    return TOOLKIT_BASE_CONFIG + (TOOLKIT_BASE_UNITS if refresh_units else "") + "exit 0\n"


# nvidia-container-toolkit's postinst and postrm: the hook's old name as a link, as NVIDIA's package keeps it.
TOOLKIT_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = "configure" ] && [ -f /usr/bin/nvidia-container-runtime-hook ] \\
        && [ ! -e /usr/bin/nvidia-container-toolkit ]; then
    ln -s /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit
fi
exit 0
"""

TOOLKIT_POSTRM = """\
#!/bin/sh
set -e
if [ "$1" = "purge" ] && [ -L /usr/bin/nvidia-container-toolkit ]; then
    rm /usr/bin/nvidia-container-toolkit
fi
exit 0
"""

# DKMS builds the module for the running kernel and runs depmod, which rewrites modules.dep; the lab writes the
# entry depmod would (the module itself is emulated), so whatever watches the index sees a driver change.
KMOD_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
    dir=/lib/modules/$(uname -r)
    mkdir -p "$dir/updates/dkms"
    touch "$dir/modules.dep"
    { grep -v '^updates/dkms/nvidia' "$dir/modules.dep" || true; \\
      echo "updates/dkms/nvidia.ko:"; echo "updates/dkms/nvidia-uvm.ko: updates/dkms/nvidia.ko"; } > "$dir/.modules.dep.new"
    cat "$dir/.modules.dep.new" > "$dir/modules.dep"
    rm -f "$dir/.modules.dep.new"
fi
exit 0
"""

KMOD_POSTRM = """\
#!/bin/sh
set -e
if [ "$1" = "remove" ] || [ "$1" = "purge" ]; then
    dir=/lib/modules/$(uname -r)
    if [ -f "$dir/modules.dep" ]; then
        { grep -v '^updates/dkms/nvidia' "$dir/modules.dep" || true; } > "$dir/.modules.dep.new"
        cat "$dir/.modules.dep.new" > "$dir/modules.dep"
        rm -f "$dir/.modules.dep.new"
    fi
fi
exit 0
"""
