"""Containers that look at their host: a privileged container with the host's root (a hostPath of ``/``) mounted.

That is what the conformance suite's probe (``--connection pod``) and the GPU Operator's validator are: a shell
image that runs the host's own tools from the host's root. On a lab node the agent runs such a container's command
ON THE LAB HOST, in the namespaces of one of the host's processes (``nsenter -t <pid> -m -u -i -n -p``, the pid
found as ``HostView.live_root`` finds it), so what it prints is the host's real state: its nvidia-smi, its
containerd, its systemd, its journal. Inside the host's namespaces the host's root is ``/`` itself, so the
container's environment says ``/`` wherever it named the mount path. Its output is the container's log, its exit
status the container's.

Where no host process exists the container fails with a log line that says so: a virtual node (no host behind
it), or a fake host root of the tests that is not running. A virtual node given a stand-in (``attach_host`` with
``env``: the tests' stand-in tools, tests/conformance/shims.py) runs the command on this machine with that
environment instead, which is how the tests against the lab cluster run the probe on virtual nodes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from .runtime import CATALOGUE, ContainerPlan, container_argv, normalize_image, pull_failure

Obj = dict[str, Any]
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LIMIT_S = 600.0  # the longest a host command may run (the pod's own timeouts are shorter)


def host_root_mount(pod: Obj, container: Obj) -> str | None:
    """Where a privileged container mounts the host's root (a hostPath volume of ``/``), else None."""
    if not (container.get("securityContext") or {}).get("privileged"):
        return None
    roots = {
        v.get("name")
        for v in (pod.get("spec") or {}).get("volumes") or []
        if (v.get("hostPath") or {}).get("path", "").rstrip("/") == ""
        and (v.get("hostPath") or {}).get("path") is not None
    }
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") in roots:
            return str(mount.get("mountPath") or "")
    return None


def _env(container: Obj, mount: str) -> dict[str, str]:
    env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e}
    return {k: ("/" if v.rstrip("/") == mount.rstrip("/") else v) for k, v in env.items()}


def run_host_container(
    pod: Obj,
    container: Obj,
    mount: str,
    pid: int | None,
    stand_in: Mapping[str, str] | None = None,
) -> ContainerPlan:
    """Run the container's command on the host of process ``pid`` (or with the stand-in's environment here)."""
    image = container.get("image", "")
    repo, _tag = normalize_image(image)
    if repo not in CATALOGUE:
        return ContainerPlan(exit_code=None, waiting=pull_failure(image))
    digest, entrypoint, cmd = CATALOGUE[repo]
    argv = container_argv(container, entrypoint, cmd)
    node = (pod.get("spec") or {}).get("nodeName", "")
    env = _env(container, mount)
    if stand_in is not None:
        full = [*argv]
        env = {"PATH": HOST_PATH, **env, **stand_in}
    elif pid is not None:
        full = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "--", *argv]
        env = {"PATH": HOST_PATH, "LANG": "C.UTF-8", **env}
    else:
        return ContainerPlan(
            logs=f"gpuready lab: {node} has no running host behind it (a virtual node): a container that reads "
            f"the host's root ({mount}) has no host to run on\n",
            exit_code=1,
            run_seconds=0.1,
            image_id=f"{repo}@{digest}",
        )
    proc = subprocess.Popen(
        full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one log, both streams, as the kubelet keeps them
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return ContainerPlan(
        logs=out.decode(errors="replace"),
        exit_code=proc.returncode if proc.returncode >= 0 else 128 - proc.returncode,
        run_seconds=0.1,
        image_id=f"{repo}@{digest}",
    )
