"""Cluster objects as pyinfra operations: run from the machine running pyinfra, reported like any operation.

Each operation reads the live object when pyinfra prepares the run and yields the API call only when the live
object does not already say what the spec says, so a second run reports no changes.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, OperationError, operation

from gpuready import atomic, kube


@cache
def cluster(kubeconfig: str | None, context: str | None) -> kube.Cluster:
    """One client per kubeconfig and context for the whole run (connecting is checked once, fast)."""
    try:
        return kube.connect(kubeconfig, context)
    except kube.KubeError as exc:
        raise OperationError(str(exc)) from exc


@operation()
def applied(
    manifest: dict[str, Any],
    kubeconfig: str | None = None,
    context: str | None = None,
    take_ownership: bool = False,
):
    """
    Server-side apply a Kubernetes object when the live one differs from it.

    + manifest: the object (apiVersion, kind, metadata.name, ...)
    + kubeconfig, context: which cluster (default: $KUBECONFIG or ~/.kube/config)
    + take_ownership: take over fields another field manager set (SSA force); off, such a conflict fails the
      operation naming the object, the fields and their managers, before anything is changed
    """
    c = cluster(kubeconfig, context)
    if not kube.needs_apply(c, manifest):
        host.noop(f"{kube.describe(manifest)} is up to date")
        return
    live = kube.get_live(c, manifest)
    if changes := kube.immutable_changes(live, manifest):
        # e.g. a PriorityClass's value: pods admitted before keep the priority they were given
        labels = (live or {}).get("metadata", {}).get("labels") or {}
        ours = all(labels.get(key) == value for key, value in kube.MANAGED_BY.items())
        if not ours and not take_ownership:
            raise OperationError(
                f"{kube.describe(manifest)}: {', '.join(changes)} cannot change on a live object, and this one is "
                f"not gpuready's (no {kube.MANAGED_BY_SELECTOR} label): delete it, or set "
                "addons_take_ownership = True to let the deploy replace it"
            )
        yield FunctionCommand(kube.delete, (c, manifest), {})
        yield FunctionCommand(kube.apply, (c, manifest), {"take_ownership": take_ownership})
        return
    if not take_ownership:
        try:
            kube.check_apply(c, manifest)
        except kube.KubeError as exc:
            raise OperationError(str(exc)) from None
    yield FunctionCommand(kube.apply, (c, manifest), {"take_ownership": take_ownership})


def _patch_labels(c: kube.Cluster, node: str, labels: dict[str, str | None]) -> None:
    c.core.patch_node(node, {"metadata": {"labels": labels}})


@operation()
def node_labels(node: str, labels: dict[str, str], kubeconfig: str | None = None, context: str | None = None):
    """
    Set labels on a Node (other labels are left alone).

    + node: the Node's name
    + labels: label key -> value
    """
    c = cluster(kubeconfig, context)
    try:
        meta = c.core.read_node(node).metadata
        live = (meta.labels if meta else None) or {}
    except Exception as exc:
        raise OperationError(
            f"node {node} is not in the cluster ({c.url}): {getattr(exc, 'reason', exc)}"
        ) from exc
    changes = {k: v for k, v in labels.items() if live.get(k) != v}
    if not changes:
        host.noop(f"node {node} has its labels")
        return
    yield FunctionCommand(_patch_labels, (c, node, changes), {})


def _stale(
    c: kube.Cluster, rendered: list[dict[str, Any]], also_kinds: tuple[tuple[str, str], ...] = ()
) -> list[dict[str, Any]]:
    """Objects labelled as gpuready's, of the kinds it renders (and ``also_kinds``), that the spec no longer
    renders."""
    wanted = {
        (m["apiVersion"], m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in rendered
    }
    kinds = sorted({(m["apiVersion"], m["kind"]) for m in rendered} | set(also_kinds))
    stale = []
    for api_version, kind in kinds:
        resource = c.dynamic.resources.get(api_version=api_version, kind=kind)
        items = resource.get(label_selector=kube.MANAGED_BY_SELECTOR).to_dict().get("items") or []
        for item in items:
            meta = item["metadata"]
            if (api_version, kind, meta.get("namespace"), meta["name"]) not in wanted:
                stale.append({"apiVersion": api_version, "kind": kind, "metadata": meta})
    return stale


@operation()
def pruned(
    rendered: list[dict[str, Any]],
    prune: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
    also_kinds: tuple[tuple[str, str], ...] = (),
):
    """
    Delete gpuready's objects the spec no longer renders (a removed pool's config, quota, priority class).

    + rendered: every object the add-ons deploy renders now
    + prune: really delete; without it the stale objects are only named, since deleting is not undoable
    + also_kinds: (apiVersion, kind) looked at even when nothing rendered is of that kind (an add-on turned off)
    """
    c = cluster(kubeconfig, context)
    stale = _stale(c, rendered, also_kinds)
    if not stale:
        host.noop("no stale gpuready objects")
        return
    if not prune:
        host.noop(f"not pruning {', '.join(kube.describe(m) for m in stale)} (set addons_prune = True)")
        return
    for manifest in stale:
        yield FunctionCommand(kube.delete, (c, manifest), {})


@operation()
def local_file(path: str, text: str):
    """
    A file on the machine running pyinfra (not on the hosts), such as the alert rules: written when its content
    differs, so a second run reports no change and ``--dry`` writes nothing.

    + path: where (relative to where pyinfra runs)
    + text: the whole content
    """
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            host.noop(f"{path} is up to date")
            return
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: written
    yield FunctionCommand(atomic.write_text, (path, text), {})
