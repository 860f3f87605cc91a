"""``--connection pod``: the host and gpu layers with only a kubeconfig, through one short-lived probe pod per node.

For every node still in the running at once, a pod pinned to the node runs the commands of both node-side layers
(the same strings the SSH runner would run: ``plugin.PROBE_LAYERS``, from ``checks.host.commands(node)`` and
``checks.gpu.commands(node)``) with the host's own tools, from a read-only view of the host's root (a hostPath of
``/`` at ``/host``, each command chrooted there, as the GPU Operator's validator does; ``nvidia-smi`` from
``/run/nvidia/driver`` where the GPU Operator's driver container keeps it). The image only needs a POSIX shell,
``chroot``, ``timeout``, ``mktemp`` and ``base64`` (and ``tr`` where its ``base64`` has no ``-w0``): a stock
minimal image (knob ``probe_image``, default Debian slim) serves, and a mirror is one knob. The pod prints ONE
JSON document on one line::

    {"format": "gpuready-probe/v1", "driver_root": "/", "results": [{"rc": 0, "stdout": "<base64>",
     "stderr": "<base64>"}, ...]}

with one result per command, in the order of the pod's arguments. The suite reads it through the API (the pod's
log), fills the node's command cache with it, and the same pure checks judge the outputs: a check cannot tell a
probe's answer from an SSH session's.

Privilege stays in one place: the probes run in a namespace of the run's own (``gpuready-conformance-probe-*``),
the only one labelled for Pod Security ``privileged`` (the workloads' namespace keeps enforcing ``restricted``);
the pod mounts no service account token and its ServiceAccount (the namespace's default) is bound to nothing.
The probe pods are deleted as soon as their answers are read, the namespace when the run ends: on success,
failure, timeout, Ctrl-C and SIGTERM (the suite's cleanup).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from testinfra.backend.base import BaseBackend, CommandResult

from gpuready.conformance.checks import Output
from gpuready.conformance.checks.host import CONTAINERD_COMMAND
from gpuready.conformance.runners import ConnectionFailed, NodeRunner, _OncePerRun
from gpuready.kube import MANAGED_BY
from gpuready.spec import NodeSpec

Obj = dict[str, Any]
FORMAT = "gpuready-probe/v1"
MARKER = "gpuready-probe"  # the script's $0: names it in `ps` on the node
HOST_MOUNT = "/host"
GPU_OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
CHECK_LABEL = "probe"  # gpuready.io/check of the probe pods
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}
PATH = (
    "/usr/sbin:/sbin:/usr/local/nvidia/toolkit"  # after the image's: chroot, and the GPU Operator's toolkit
)

# POSIX sh (dash, busybox ash). $@ are the commands; each runs in the host's root (chroot), nvidia-smi in the
# driver's root, bounded by timeout(1) (exit 124, as over SSH). Outputs go through files, base64-encoded, so the
# document is valid JSON whatever the tools print.
SCRIPT = (
    r"""root="${GPUREADY_HOST_ROOT:-/host}"
t="${GPUREADY_COMMAND_TIMEOUT:-60}"
export PATH="${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}:__PATH__"
dr=/
[ -x "$root/run/nvidia/driver/usr/bin/nvidia-smi" ] && dr=/run/nvidia/driver
tmp=$(mktemp -d) || exit 70
trap 'rm -rf "$tmp"' EXIT
# one line of base64: -w0 where base64 has it (coreutils, busybox), else a tr after it (a process more a stream)
if base64 -w0 </dev/null >/dev/null 2>&1; then b64() { base64 -w0 <"$1"; }; else b64() { base64 <"$1" | tr -d '\n'; }; fi
run_in() {
  case "$1" in
    nvidia-smi*) r="${root%/}$dr" ;;
    *) r="$root" ;;
  esac
  [ "$r" = "${r%/}/" ] && [ "$r" != / ] && r="${r%/}"
  if [ "$r" = / ]; then timeout "$t" /bin/sh -c "$1"; else timeout "$t" chroot "$r" /bin/sh -c "$1"; fi
}
# `containerd config dump` is cut to the keys the host checks read, so registry credentials never reach the log:
# version; the CRI plugin's enable_cdi and cdi_spec_dirs; its runtimes' runtime_type, BinaryName, SystemdCgroup
read_keys() {
  k_s=top; k_a=
  while IFS= read -r k_l || [ -n "$k_l" ]; do
    k_t=${k_l#"${k_l%%[![:space:]]*}"}
    if [ -n "$k_a" ]; then
      printf '%s\n' "$k_t"
      case "$k_t" in *]*) k_a= ;; esac
      continue
    fi
    case "$k_t" in
      '['*)
        k_s=drop
        case "$k_t" in
          '[plugins.cri]'*|'[plugins."io.containerd.grpc.v1.cri"]'*|"[plugins.'io.containerd.grpc.v1.cri']"*|\
          '[plugins."io.containerd.cri.v1.runtime"]'*|"[plugins.'io.containerd.cri.v1.runtime']"*) k_s=cri ;;
          '[plugins.cri.containerd.runtimes.'*|'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.'*|\
          "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes."*|\
          '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.'*|\
          "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes."*) k_s=rt ;;
        esac
        case "$k_t" in '[['*) k_s=drop ;; esac
        [ "$k_s" = drop ] || printf '%s\n' "$k_t" ;;
      *=*)
        k_k=${k_t%%=*}; k_k=${k_k%"${k_k##*[![:space:]]}"}
        case "$k_s:$k_k" in
          top:version|cri:enable_cdi|cri:cdi_spec_dirs|rt:runtime_type|rt:BinaryName|rt:SystemdCgroup)
            printf '%s\n' "$k_t"
            case "$k_t" in *=*'['*) case "$k_t" in *]*) ;; *) k_a=1 ;; esac ;; esac ;;
        esac ;;
    esac
  done
}
printf '{"format":"__FORMAT__","driver_root":"%s","results":[' "$dr"
sep=
for c in "$@"; do
  run_in "$c" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  o="$tmp/out"
  case "$c" in "__CONTAINERD__") read_keys <"$tmp/out" >"$tmp/kept"; o="$tmp/kept" ;; esac
  printf '%s{"rc":%d,"stdout":"' "$sep" "$rc"
  b64 "$o"
  printf '","stderr":"'
  b64 "$tmp/err"
  printf '"}'
  sep=,
done
printf ']}\n'
""".replace("__PATH__", PATH)
    .replace("__FORMAT__", FORMAT)
    .replace("__CONTAINERD__", CONTAINERD_COMMAND)
)


class ProbeError(Exception):
    """The probe's log holds no readable answer; the message says what was wrong."""


def argv(commands: Sequence[str]) -> list[str]:
    """The probe container's command: the script, its $0, then one argument per command."""
    return ["/bin/sh", "-c", SCRIPT, MARKER, *commands]


def render(outputs: Sequence[Output], driver_root: str = "/") -> str:
    """The document the script prints for these outputs (what the lab answers with, and the tests' inverse)."""
    results = [
        {
            "rc": out.rc,
            "stdout": base64.b64encode(out.stdout.encode()).decode(),
            "stderr": base64.b64encode(out.stderr.encode()).decode(),
        }
        for out in outputs
    ]
    return json.dumps({"format": FORMAT, "driver_root": driver_root, "results": results}) + "\n"


def parse(log: str, commands: Sequence[str]) -> dict[str, Output]:
    """{command: Output} from a probe's log: the last line carrying the document, one result per command."""
    line = next((ln for ln in reversed(log.splitlines()) if ln.startswith('{"format":')), None)
    if line is None:
        tail = " / ".join(ln for ln in log.splitlines()[-3:] if ln.strip()) or "nothing"
        raise ProbeError(f"no {FORMAT} document in its log (it printed: {tail})")
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise ProbeError(f"its document is not JSON ({exc}): cut short?") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProbeError(f"its document is not {FORMAT}: {line[:120]}")
    results = doc.get("results")
    if not isinstance(results, list) or len(results) != len(commands):
        got = len(results) if isinstance(results, list) else "no"
        raise ProbeError(f"it answered {got} of {len(commands)} commands")
    out: dict[str, Output] = {}
    for command, result in zip(commands, results, strict=True):
        try:
            out[command] = Output(
                int(result["rc"]),
                base64.b64decode(result["stdout"], validate=True).decode(errors="replace"),
                base64.b64decode(result["stderr"], validate=True).decode(errors="replace"),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ProbeError(f"unreadable result for `{command}`: {exc}") from None
    return out


def pod_name(node: str, run: int) -> str:
    """``probe-<run>-<node>``, a DNS label (63 characters at most: long node names end with a hash)."""
    name = f"probe-{run}-{node}".lower()
    if len(name) > 63:
        name = name[:52] + "-" + hashlib.sha256(node.encode()).hexdigest()[:10]
    return name


def probe_pod(name: str, node: NodeSpec, commands: Sequence[str], image: str, command_timeout: float) -> Obj:
    """The probe: pinned to ``node``, tolerating every taint (a probe must reach a cordoned or tainted node, as
    the validator does), privileged (the GPU devices and the host's systemd), the host's root read-only, in the
    host's PID namespace: systemd answers ``systemctl`` only from a peer whose PID it can see (from a pod's own
    namespace, on the real-kubelet lab: "Failed to connect to system scope bus via local transport: No data
    available", and every ``systemctl is-active`` check failed)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {**MANAGED_BY, "gpuready.io/check": CHECK_LABEL},
            "annotations": {"gpuready.io/node": node.name},
        },
        "spec": {
            "restartPolicy": "Never",
            "hostPID": True,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "command": argv(commands),
                    "env": [
                        {"name": "GPUREADY_HOST_ROOT", "value": HOST_MOUNT},
                        {"name": "GPUREADY_COMMAND_TIMEOUT", "value": f"{max(1, round(command_timeout))}"},
                    ],
                    "securityContext": {"privileged": True, "runAsUser": 0},
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "volumeMounts": [
                        {
                            "name": "host-root",
                            "mountPath": HOST_MOUNT,
                            "readOnly": True,
                            "mountPropagation": "HostToContainer",
                        }
                    ],
                }
            ],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}],
        },
    }


class ProbeBackend(_OncePerRun, BaseBackend):
    """A node's testinfra backend whose answers come from probe pods: the fleet fills its cache a layer at a
    time; a command no layer asked for (a site check's ``host.file(...)``) gets a probe pod of its own."""

    NAME = "gpuready-probe"

    def __init__(self, fleet: ProbeFleet, node: NodeSpec, timeout: float) -> None:
        super().__init__(node.name)
        self.fleet = fleet
        self.node = node
        self.timeout = timeout
        self._encoding = "utf-8"  # never ask the node (testinfra would run python3 there to find out)
        self.error: ConnectionFailed | None = None
        self._start_cache()

    def answer(self, command: str, out: Output) -> None:
        self._cache[self.get_command(command)] = self.result(
            out.rc, self.encode(command), out.stdout, out.stderr
        )

    def has(self, command: str) -> bool:
        return self.get_command(command) in self._cache

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        if self.error is not None:
            raise self.error
        return super().run(command, *args, **kwargs)

    def execute(self, command: str) -> CommandResult:
        self.fleet.gather({self.node.name: [command]})
        if self.error is not None:
            raise self.error
        self.commands_run -= 1  # counted where the probe ran it
        return self._cache[command]


class ProbeFleet:
    """The run's probe pods: ``gather({node: commands})`` runs one probe per node at once (one watch), fills
    each node's backend with the answers, and deletes the pods; a node whose probe did not answer fails its
    connection check with where the pod got to (its events, its log)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        connect: Callable[[], Any],
        command_timeout: float,
        pod_timeout: float,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self._connect = connect
        self.command_timeout = command_timeout
        self.pod_timeout = pod_timeout
        self.backends: dict[str, ProbeBackend] = {}
        self.workloads: Any = None  # gpuready.conformance.workloads.Workloads of the probe namespace
        self.runs = 0
        self.pods = 0

    def runner(self, node: NodeSpec, connection: str = "pod", timeout: float | None = None) -> NodeRunner:
        backend = self.backends.get(node.name)
        if backend is None:
            backend = ProbeBackend(self, node, self.command_timeout if timeout is None else timeout)
            self.backends[node.name] = backend
        return NodeRunner(node.name, backend)

    def gather(self, wanted: Mapping[str, Sequence[str]]) -> None:
        """One probe pod per node of ``wanted`` that still misses a command, all at once."""
        from gpuready.conformance.workloads import NAMESPACE_PREFIX, Workloads
        from gpuready.kube import KubeError

        jobs: dict[str, list[str]] = {}
        for name, commands in wanted.items():
            backend = self.backends.get(name) or self.runner(self.nodes[name]).backend
            assert isinstance(backend, ProbeBackend)
            todo = [c for c in dict.fromkeys(commands) if not backend.has(c)]
            if todo and backend.error is None:
                jobs[name] = todo
        if not jobs:
            return
        try:
            cluster = self._connect()
        except KubeError as exc:
            for name in jobs:
                self.backends[name].error = ConnectionFailed(f"no probe pod: {exc}")
            return
        if self.workloads is None:
            self.workloads = Workloads(
                cluster, NAMESPACE_PREFIX + "probe-" + secrets.token_hex(4), pod_security="privileged"
            )
        self.runs += 1
        pods: dict[str, tuple[str, list[str]]] = {}
        specs: list[tuple[Obj, str]] = []
        for name, todo in jobs.items():
            node = self.nodes[name]
            pod = probe_pod(pod_name(name, self.runs), node, todo, node.images.probe, self.command_timeout)
            pods[pod["metadata"]["name"]] = (name, todo)
            specs.append((pod, "finished"))
        try:
            results = self.workloads.run(specs, self.pod_timeout)
        finally:
            self.pods += len(pods)
            self.workloads.release([CHECK_LABEL], timeout=min(self.pod_timeout, 60.0))
        for pod_name_, (name, todo) in pods.items():
            res = results.get(pod_name_)
            backend = self.backends[name]
            if res is None or res.exit_code != 0 or res.timed_out:
                where = res.describe() if res is not None else f"pod {pod_name_}: never seen"
                backend.error = ConnectionFailed(f"the probe pod did not answer: {where}")
                continue
            try:
                answers = parse(res.log, todo)
            except ProbeError as exc:
                backend.error = ConnectionFailed(f"probe pod {pod_name_} (exit code {res.exit_code}): {exc}")
                continue
            for command, out in answers.items():
                backend.answer(command, out)
                backend.commands_run += 1

    def delete(self) -> None:
        """Delete the probe namespace (idempotent; the suite's cleanup calls it)."""
        if self.workloads is not None:
            self.workloads.delete()
