"""What a pod's containers do on a virtual node: the node agent's `PodRuntime`.

A virtual node has no host and no container runtime behind it, so the agent's kubelet asks `CatalogueRuntime` for
each container's fate: the few public images it knows (busybox, pause, debian, alpine) run a tiny shell (echo,
printf, sleep, exit, env), placeholders (``PLACEHOLDER_PREFIX``) run until deleted, and any other image fails to
pull as in an air-gapped cluster. NVIDIA's images never run
here: the lab's real hosts run NVIDIA's real device plugin, GFD, NFD and DRA driver on the real kubelet.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol

Obj = dict[str, Any]


@dataclass
class ContainerPlan:
    """One container's life: optional waiting states, then run for `run_seconds` and exit (None: run forever)."""

    logs: str = ""
    exit_code: int | None = 0
    run_seconds: float = 0.0
    reason: str | None = None  # terminated reason; default "Completed" for 0 and "Error" otherwise
    message: str | None = None
    # (seconds after start, reason, message): the container stays waiting, e.g. ErrImagePull -> ImagePullBackOff.
    waiting: list[tuple[float, str, str]] = field(default_factory=list)
    image_id: str = ""
    # (seconds after start, length of `logs` written by then): lets `logs -f` show output as it happens.
    log_times: list[tuple[float, int]] = field(default_factory=list)

    def logs_at(self, elapsed: float) -> str:
        if not self.log_times:
            return self.logs
        upto = max((n for t, n in self.log_times if t <= elapsed), default=0)
        return self.logs[:upto]


class PodRuntime(Protocol):
    def plan(self, pod: Obj, container: Obj, node: Obj | None) -> ContainerPlan:
        """Decide what this container does when the pod starts on `node` (called once per start/restart)."""
        ...


# the default catalogue -----------------------------------------------------------------------------------------

# repository -> (digest, image ENTRYPOINT, image CMD). Images outside this list cannot be pulled.
CATALOGUE = {
    "docker.io/library/busybox": (
        "sha256:2919d0172f7524b2d8df9e50066a682669e6d170ac0f6a49676d54358fe970b5",
        [],
        ["sh"],
    ),
    "registry.k8s.io/pause": (
        "sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
        ["/pause"],
        [],
    ),
    "docker.io/library/debian": (  # the conformance probe's default (knob probe_image)
        "sha256:5f6ab4ae2ba3d4e8ac6d3c3ef32e1b7c0df6d1e2c9e0e0e5e3cf0b9c2a5d1e77",
        [],
        ["bash"],
    ),
    "docker.io/library/alpine": (
        "sha256:4bcff63911fcb4448bd4fdacec207030997caf25e9bea4045fa6c8c44de311d1",
        [],
        ["/bin/sh"],
    ),
}


# Images under this prefix are placeholders that run until deleted, whatever their name or tag (the scale bench
# deploys gpuready's add-ons with them: a virtual node has no host for NVIDIA's software to look at, and a
# placeholder named for the add-on still tells the suite's checks which add-on a pod is).
PLACEHOLDER_PREFIX = "localhost/gpuready-lab/"


def container_argv(container: Obj, entrypoint: list[str], cmd: list[str]) -> list[str]:
    """The process Kubernetes starts: `command` replaces ENTRYPOINT, `args` replace CMD (and CMD is dropped
    when only `command` is given)."""
    command, args = container.get("command"), container.get("args")
    if command:
        return list(command) + list(args or [])
    return list(entrypoint) + list(args if args else cmd)


def normalize_image(image: str) -> tuple[str, str]:
    """("docker.io/library/busybox", "latest") for "busybox", as containerd names it."""
    name, tag = image, "latest"
    if "@" in name:
        name, tag = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return name, tag


def pull_failure(image: str) -> list[tuple[float, str, str]]:
    """The waiting states of an image that cannot be pulled without internet access."""
    repo, tag = normalize_image(image)
    ref = f"{repo}:{tag}" if not tag.startswith("sha256:") else f"{repo}@{tag}"
    registry = repo.split("/", 1)[0]
    host = "registry-1.docker.io" if registry == "docker.io" else registry
    path = repo.split("/", 1)[1]
    msg = (
        f'rpc error: code = Unknown desc = failed to pull and unpack image "{ref}": failed to resolve reference '
        f'"{ref}": failed to do request: Head "https://{host}/v2/{path}/manifests/{tag}": dial tcp: lookup '
        f"{host}: no such host"
    )
    return [
        (0.0, "ErrImagePull", msg),
        (1.0, "ImagePullBackOff", f'Back-off pulling image "{image}": ErrImagePull: {msg}'),
    ]


class CatalogueRuntime:
    """Runs catalogue images with a tiny shell: echo, printf, sleep, exit, true, false, env, cat of nothing."""

    def plan(self, pod: Obj, container: Obj, node: Obj | None) -> ContainerPlan:
        image = container.get("image", "")
        repo, _tag = normalize_image(image)
        if repo.startswith(PLACEHOLDER_PREFIX):
            return ContainerPlan(exit_code=None, image_id=f"{repo}:{_tag}")
        if repo not in CATALOGUE:
            return ContainerPlan(exit_code=None, waiting=pull_failure(image))
        digest, entrypoint, cmd = CATALOGUE[repo]
        argv = container_argv(container, entrypoint, cmd)
        plan = run_argv(
            argv, {e["name"]: e.get("value", "") for e in container.get("env") or [] if "name" in e}
        )
        plan.image_id = f"{repo}@{digest}"
        return plan


def run_argv(argv: list[str], env: dict[str, str]) -> ContainerPlan:
    if not argv:
        return ContainerPlan()
    prog = argv[0].rsplit("/", 1)[-1]
    if prog == "pause":
        return ContainerPlan(exit_code=None)
    if prog in ("sh", "ash", "bash") and len(argv) >= 3 and argv[1] == "-c":
        return _run_script(argv[2], env)
    if prog in ("sh", "ash", "bash") and len(argv) == 1:
        return ContainerPlan()  # no stdin: the shell exits at once
    out: list[str] = []
    code, secs = _run_command(argv, env, out)
    if code == 127:
        return ContainerPlan(
            exit_code=128,
            reason="StartError",
            message=(
                "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc "
                "create failed: unable to start container process: error during container init: exec: "
                f'"{argv[0]}": executable file not found in $PATH: unknown'
            ),
        )
    return ContainerPlan(
        logs="".join(out),
        exit_code=None if secs == float("inf") else code,
        run_seconds=0 if secs == float("inf") else secs,
    )


def _run_script(script: str, env: dict[str, str]) -> ContainerPlan:
    out: list[str] = []
    marks: list[tuple[float, int]] = []
    total = 0.0
    code = 0

    def plan(exit_code: int | None) -> ContainerPlan:
        return ContainerPlan(logs="".join(out), exit_code=exit_code, run_seconds=total, log_times=marks)

    for line in script.replace("\n", ";").split(";"):
        for part in line.split("&&"):
            part = part.strip()
            if not part:
                continue
            for k, v in env.items():
                part = part.replace(f"${{{k}}}", v).replace(f"${k}", v)
            try:
                argv = shlex.split(part)
            except ValueError:
                out.append("sh: syntax error: unterminated quoted string\n")
                return plan(2)
            if argv and argv[0] == "exit":
                return plan(int(argv[1]) if len(argv) > 1 else code)
            code, secs = _run_command(argv, env, out)
            if code == 127:
                out.append(f"sh: {argv[0]}: not found\n")
            marks.append((total, len("".join(out))))
            if secs == float("inf"):
                return plan(None)
            total += secs
            if code != 0:
                break
    return plan(code)


def _run_command(argv: list[str], env: dict[str, str], out: list[str]) -> tuple[int, float]:
    """(exit code, seconds it runs); inf for forever, 127 for an unknown program."""
    prog = argv[0].rsplit("/", 1)[-1]
    if prog == "echo":
        args = argv[1:]
        newline = True
        if args and args[0] == "-n":
            newline, args = False, args[1:]
        out.append(" ".join(args) + ("\n" if newline else ""))
        return 0, 0.0
    if prog == "printf" and len(argv) > 1:
        out.append(
            argv[1].replace("\\n", "\n") % tuple(argv[2:]) if "%" in argv[1] else argv[1].replace("\\n", "\n")
        )
        return 0, 0.0
    if prog == "sleep":
        arg = argv[1] if len(argv) > 1 else "0"
        if arg == "infinity":
            return 0, float("inf")
        try:
            return 0, float(arg.rstrip("s"))
        except ValueError:
            out.append(f"sleep: invalid number '{arg}'\n")
            return 1, 0.0
    if prog == "true":
        return 0, 0.0
    if prog == "false":
        return 1, 0.0
    if prog == "env":
        out.extend(f"{k}={v}\n" for k, v in env.items())
        return 0, 0.0
    if prog in ("tail", "cat") and "-f" in argv:
        return 0, float("inf")
    return 127, 0.0
