"""Command-line values both front ends (the ``gpuready`` CLI and the conformance plugin) check the same way, before
anything runs: durations in seconds, the report directory, the kubeconfig. Each check names the option and what is
wrong with the value; none connects to anything."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above zero (``--command-timeout``, ``--pod-timeout``)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a timeout must be a finite number of seconds above 0")
    return value


def report_dir_problem(path: str) -> str | None:
    """Why ``--report-dir path`` cannot take the run's reports (None when it can): checked by creating the
    directory and a file in it, so a read-only or foreign directory is found before the run, not after it."""
    import tempfile

    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        return f"--report-dir {path}: not a directory"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--report-dir {path}: cannot create it: {exc.strerror or exc}"
    try:
        with tempfile.NamedTemporaryFile(dir=target, prefix=".gpuready-write-check-"):
            pass
    except OSError as exc:
        return f"--report-dir {path}: cannot write in it: {exc.strerror or exc}"
    return None


# Where Kubernetes mounts a pod's service account (its token, the cluster's CA, the pod's namespace)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_pod() -> bool:
    """Whether this process runs in a Kubernetes pod with a service account: ``$KUBERNETES_SERVICE_HOST`` set and
    the token mounted. Then a run with no kubeconfig, no context and no ``$KUBECONFIG`` uses the in-cluster
    configuration (:func:`gpuready.kube.connect`): the pod's service account is the cluster given."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (Path(SERVICE_ACCOUNT_DIR) / "token").is_file()


def kubeconfig_problem(explicit: str | None, named_by: str = "--kubeconfig") -> str | None:
    """Why the kubeconfig a run would read cannot be used, None when it can (or none is named): ``explicit``
    (--kubeconfig, the inventory's ``kubeconfig``) must be a usable file; else the files of ``$KUBECONFIG`` (a
    list, as kubectl reads it: a missing entry is skipped, but at least one must exist). The client's default
    ``~/.kube/config`` is left to the client: it is optional."""
    if explicit:
        return kubeconfig_file_problem(explicit, named_by)
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not listed:
        return None
    present = [p for p in listed if Path(p).expanduser().exists()]
    if not present:
        return f"$KUBECONFIG {os.environ['KUBECONFIG']}: no such file"
    return next((x for p in present if (x := kubeconfig_file_problem(p, "$KUBECONFIG")) is not None), None)


def kubeconfig_file_problem(path: str, named_by: str = "--kubeconfig") -> str | None:
    """Why the kubeconfig at ``path`` cannot be used (None when it can): it exists, is readable, is YAML and a
    kubeconfig mapping (clusters, contexts or users). Its contents are never quoted: they hold credentials."""
    import yaml

    file = Path(path).expanduser()
    where = f"{named_by} {path}"
    if not file.exists():
        return f"{where}: no such file"
    if not file.is_file():
        return f"{where}: not a file"
    try:
        text = file.read_text()
    except OSError as exc:
        return f"{where}: cannot read it: {exc.strerror or exc}"
    except UnicodeDecodeError:
        return f"{where}: not a text file"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        return f"{where}: not YAML{at}"
    if not isinstance(doc, dict) or not any(k in doc for k in ("clusters", "contexts", "users")):
        return f"{where}: not a kubeconfig (no clusters, contexts or users)"
    return None
