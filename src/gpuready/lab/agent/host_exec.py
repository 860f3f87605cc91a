"""Containers that look at their host: a privileged container with the host's root (a hostPath of ``/``) mounted.

That is what the conformance suite's probe (``--connection pod``) and the GPU Operator's validator are: a shell
image that runs the host's own tools from the host's root. On a lab node the agent runs such a container's command
ON THE LAB HOST, in the namespaces of one of the host's processes (``nsenter -t <pid> -m -u -i -n -p``, the pid
found as ``HostView.live_root`` finds it), so what it prints is the host's real state: its nvidia-smi, its
containerd, its systemd, its journal. Inside the host's namespaces the host's root is ``/`` itself, so the
container's environment says ``/`` wherever it named the mount path. Its output is the container's log, its exit
status the container's. A pod's ``nvidia-smi`` (gpu_images) is the host's and starts the same way (``host_argv``).

Where no host process exists the container fails with a log line that says so: a virtual node (no host behind
it), or a fake host root of the tests that is not running. A virtual node given a stand-in (``attach_host`` with
``env``: the tests' stand-in tools, tests/conformance/shims.py) runs the command on this machine with that
environment instead, which is how the tests against the lab cluster run the probe on virtual nodes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
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
    command = host_argv(argv, _env(container, mount), pid, stand_in)
    if command is None:
        return ContainerPlan(
            logs=f"gpuready lab: {node} has no running host behind it (a virtual node): a container that reads "
            f"the host's root ({mount}) has no host to run on\n",
            exit_code=1,
            run_seconds=0.1,
            image_id=f"{repo}@{digest}",
        )
    # in a worker thread: the kubelet loop goes on with the fleet's other pods meanwhile (1000 probes at once)
    return ContainerPlan(
        run_seconds=0.1, image_id=f"{repo}@{digest}", pending=HostCommand(lambda run: run(*command))
    )


def host_argv(
    argv: list[str], env: dict[str, str], pid: int | None, stand_in: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]] | None:
    """(argv, env) that start ``argv`` on the host of process ``pid`` (or here with the stand-in's environment);
    None without either."""
    if stand_in is not None:
        return [*argv], {"PATH": HOST_PATH, **env, **stand_in}
    if pid is not None:
        full = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "--", *argv]
        return full, {"PATH": HOST_PATH, "LANG": "C.UTF-8", **env}
    return None


_POOL: ThreadPoolExecutor | None = None
WORKERS = 8  # host commands at once; each mostly waits on its processes


def _workers() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="host-exec")
    return _POOL


Run = Callable[[list[str], dict[str, str]], tuple[str, int]]


class HostCommand:
    """A container's commands running in a worker thread, one after another: ``job(run)`` starts each with
    ``run(argv, env) -> (output, exit code)`` and returns the container's (log, exit code; None: it runs on).
    ``done()``, ``result()``, and ``kill()`` when its pod goes (the process group, as the container's end would);
    ``starting``: a quick job (the host's nvidia-smi in a pod, gpu_images) whose log a reader of the container's log
    waits for (``wait``), as a real container's output is there by the time its Running status is seen."""

    def __init__(self, job: Callable[[Run], tuple[str, int | None]], starting: bool = False) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False
        self.starting = starting
        self.future = _workers().submit(job, self._run)

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> tuple[str, int | None]:
        return self.future.result()

    def wait(self) -> str:
        """The log once the job is done."""
        return self.future.result()[0]

    def kill(self) -> None:
        self.killed = True
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def _run(self, argv: list[str], env: dict[str, str]) -> tuple[str, int]:
        if self.killed:
            return "", 137
        self.proc = proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one log, both streams, as the kubelet keeps them
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        if self.killed:
            self.kill()
        try:
            out, _ = proc.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return out.decode(
            errors="replace"
        ), proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
