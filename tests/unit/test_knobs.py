"""The knob registry: group_data/all.py is generated from it, every knob is read, every bad value is refused (one
test per knob) before anything connects, fleet-wide knobs are not per host, and repeated problems are one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_spec import JOIN, problems_of, write_inventory

from gpuready.spec import knobs, load_fleet
from gpuready.spec.knobs import KNOBS, REQUIRED

REPO = Path(__file__).resolve().parents[2]

# One bad value per knob, and words its problem must carry.
BAD: dict[str, tuple[object, str]] = {
    "gpu_model": ("NVIDIA Z9000", "unknown GPU model"),
    "gpu_count": (0, "must be an integer >= 1"),
    "gpu_memory_mib": ("lots", "must be an integer >= 1"),
    "nvswitch": ("no", "must be True or False"),
    "nvidia_driver_branch": ("r580", "a driver branch like '580'"),
    "nvidia_driver_version": ("580", "must look like 580.178.04"),
    "nvidia_driver_package_revision": ("", "a Debian revision"),
    "nvidia_driver_source": ("ppa", "must be one of cuda-repo, distribution"),
    "nvidia_container_toolkit_version": ("1.20", "must be a version like 1.20.0"),
    "nvidia_container_toolkit_package_revision": ("1 1", "a Debian revision"),
    "containerd_package": ("Containerd!", "a Debian package name"),
    "kubernetes_version": ("v1.34", "must be a full version like 1.36.3"),
    "kubernetes_package_revision": (None, "a Debian revision"),
    "cuda_repo_url": ("ftp://mirror/cuda", "an http(s):// or file:// URL"),
    "cuda_repo_keyring_url": ("", "an http(s):// or file:// URL"),
    "nvidia_container_repo_url": ("mirror/nvidia", "an http(s):// or file:// URL"),
    "nvidia_container_repo_keyring_url": (None, "an http(s):// or file:// URL"),
    "kubernetes_repo_url": ("pkgs.k8s.io", "an http(s):// or file:// URL"),
    "kubernetes_repo_keyring_url": (1, "an http(s):// or file:// URL"),
    "gpu_sharing": ("timeslicing", "must be one of none, time-slicing, mps, mig"),
    "sharing_replicas": (1, "needs an integer >= 2"),
    "sharing_rename": ("yes", "must be True or False"),
    "sharing_fail_requests_greater_than_one": (1, "must be True or False"),
    "mig_strategy": ("all", "must be one of single, mixed"),
    "mig_layout": ("3g.40gb", "needs a list of MIG profiles"),
    "mig_sharing": ("mps", "MPS is not supported on MIG devices"),
    "mig_sharing_replicas": (1, "time-slicing needs an integer >= 2"),
    "gpu_allocation": ("dynamic", "must be one of device-plugin, dra"),
    "mig_destroy_in_use": ("no", "must be True or False"),
    "kube_join": ("false", "must be True or False"),
    "kube_api_endpoint": ("https://api", "host:port"),
    "kube_ca_cert_hash": ("abc", "sha256:<64 lower-case hex>"),
    "kube_join_token_file": ("", "a file path"),
    "kube_join_token_env": ("MY-TOKEN", "an environment variable name"),
    "kube_cri_socket": ("/run/containerd/containerd.sock", "a unix:/// socket URL"),
    "kube_join_ignore_preflight_errors": ("SystemVerification", "must be a list of check names"),
    "kube_join_patches_dir": ("patches", "an absolute path"),
    "node_labels": (["pool=a"], "must be a dict of label key -> value"),
    "node_taints": ("nvidia.com/gpu:NoSchedule", "must be a list of 'key[=value]:Effect'"),
    "containerd_nvidia_default_runtime": ("True", "must be True or False"),
    "nvidia_cdi": ("on", "must be True or False"),
    "upgrade_batch_size": (0, "must be an integer >= 1"),
    "upgrade_max_unavailable": ("2", "must be an integer >= 1"),
    "drain_gpu_pods_only": ("yes", "must be True or False"),
    "dra_driver_image": ("Registry.k8s.io/DRA", "image reference"),
    "drain_force": (0, "must be True or False"),
    "kubeconfig": ("", "a file path"),
    "addons_namespace": ("Bad_NS", "a namespace name"),
    "gpu_resource_quotas": ({"team-a": -1}, "team-a: -1 is not a number of GPUs"),
    "priority_classes": ({"system-gpu": 10}, "'system-gpu' is not allowed as a name"),
    "addons_prune": ("no", "must be True or False"),
    "addons_nfd": ("false", "must be True or False"),
    "addons_take_ownership": ("yes", "must be True or False"),
    "device_plugin_image": ("", "must be an image reference"),
    "gfd_image": ("nvcr.io/NVIDIA/gfd:1", "must be an image reference"),
    "nfd_image": ("registry.k8s.io/NFD:v0.17.3", "must be an image reference"),
    "dcgm_exporter_image": ("", "must be an image reference"),
    "vectoradd_image": ("nvcr.io/x:", "must be an image reference"),
    "cuda_base_image": ("cuda 12", "must be an image reference"),
    "probe_image": ("debian trixie", "must be an image reference"),
    "diag_tools": ("yes", "must be True or False"),
    "diag_dcgm_level": (4, "must be 1, 2 or 3"),
    "diag_bandwidth_floors": ({"h2d": 10}, "unknown key 'h2d'"),
    "node_ready_timeout": (0, "must be an integer >= 1"),
    "pod_timeout": ("5m", "must be an integer >= 1"),
    "drain_timeout": (-1, "must be an integer >= 1"),
    "extra_data_keys": ("rack", "must be a list of data keys"),
}
# knobs whose bad value only shows with another knob set (the rule is across knobs, in gpuready.spec)
CONTEXT: dict[str, dict[str, object]] = {
    "gpu_memory_mib": {"gpu_model": "NVIDIA Z9000"},
    "sharing_replicas": {"gpu_sharing": "time-slicing"},
    "mig_layout": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_sharing": "mig"},
    "mig_sharing": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_sharing": "mig", "mig_layout": ["7g.80gb"]},
    "mig_sharing_replicas": {
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_sharing": "mig",
        "mig_layout": ["7g.80gb"],
        "mig_sharing": "time-slicing",
    },
}


def test_group_data_is_generated_from_the_registry():
    text = (REPO / "inventory" / "group_data" / "all.py").read_text()
    assert text == knobs.render_group_data(), "run: gpuready knobs > inventory/group_data/all.py"
    generated = subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "knobs"], capture_output=True, text=True, check=True
    ).stdout
    assert generated == text
    declared: dict = {}
    exec(text, declared)
    assert {k for k in declared if not k.startswith("__")} == {
        k.name for k in KNOBS.values() if k.default is not REQUIRED
    }
    for knob in KNOBS.values():
        assert f"{knob.name}" in text  # the required ones as a comment


def test_every_knob_is_read_outside_the_registry():
    code = "".join(
        p.read_text()
        for root in ("src/gpuready", "deploys")
        for p in (REPO / root).rglob("*.py")
        if p.name != "knobs.py" and "lab" not in p.relative_to(REPO).parts
    )
    unread = [k for k in KNOBS if f'"{k}"' not in code and f"'{k}'" not in code]
    assert unread == []


def test_every_default_passes_its_own_check_and_every_knob_has_a_bad_value_here():
    for knob in KNOBS.values():
        if knob.check and knob.default is not REQUIRED:
            assert knob.check(knob.default) is None, knob.name
    assert set(BAD) == set(KNOBS)


@pytest.mark.parametrize("key", sorted(KNOBS))
def test_a_bad_value_is_refused_naming_file_host_key_value_and_what_is_allowed(tmp_path, key):
    value, words = BAD[key]
    problems = problems_of(write_inventory(tmp_path, **{**CONTEXT.get(key, {}), key: value}))
    mine = [p for p in problems if f": {key} = " in p]
    assert mine, problems
    assert any(p.startswith(f"{tmp_path / 'inv.py'}: host node-1: ") and words in p for p in mine), problems


def test_a_held_out_style_inventory_is_refused_with_every_problem_at_once(tmp_path):
    problems = problems_of(
        write_inventory(
            tmp_path,
            addons_namespace="Bad_NS",
            dcgm_exporter_image="",
            gpu_resource_quotas={"team-a": -1},
            upgrade_batch_size=3,
            upgrade_max_unavailable=1,
            mig_destroy_in_use="no",
        )
    )
    keys = sorted(p.split(": ")[2].split(" = ")[0] for p in problems)
    assert keys == sorted(
        [
            "addons_namespace",
            "dcgm_exporter_image",
            "gpu_resource_quotas",
            "upgrade_batch_size",
            "mig_destroy_in_use",
        ]
    ), problems


def _two_hosts(tmp_path: Path, a: dict, b: dict, group: dict | None = None) -> Path:
    import shutil

    (tmp_path / "group_data").mkdir(exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    base = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN}
    path = tmp_path / "inv.py"
    path.write_text(
        f"pool_a = ([('node-a', { ({**base, **a})!r})], {group or {}!r})\n"
        f"pool_b = ([('node-b', { ({**base, **b})!r})], {{}})\n"
    )
    return path


def test_a_fleet_wide_knob_set_for_one_host_is_refused(tmp_path):
    problems = problems_of(_two_hosts(tmp_path, {"addons_prune": True}, {}))
    assert (
        f"{tmp_path / 'inv.py'}: host node-a: addons_prune = True: is fleet-wide: set it in group_data/all.py, a "
        "group of every host or --data, not for one host"
    ) in problems


def test_a_fleet_wide_knob_that_pools_disagree_on_is_refused(tmp_path):
    problems = problems_of(_two_hosts(tmp_path, {}, {}, group={"addons_namespace": "gpu-a"}))
    assert problems == [
        f"{tmp_path / 'inv.py'}: every host: addons_namespace = '(differs)': is fleet-wide, one value for every host, "
        "but the hosts disagree: 'gpu-a' on node-a; 'gpu-system' on node-b"
    ]


def test_one_bad_mig_layout_on_two_hosts_of_eight_gpus_is_one_line(tmp_path):
    mig = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_sharing": "mig"}
    layout = ["7g.80gb", "1g.10gb"]
    problems = problems_of(_two_hosts(tmp_path, {**mig, "mig_layout": layout}, {**mig, "mig_layout": layout}))
    (line,) = problems
    assert line.startswith(
        f"{tmp_path / 'inv.py'}: hosts node-a, node-b: mig_layout = {layout!r}: GPUs 0-7 (NVIDIA A100-SXM4-80GB): "
    ), line


def test_a_misspelt_knob_is_named_with_the_knob_it_resembles(tmp_path):
    problems = problems_of(write_inventory(tmp_path, gpu_sharring="time-slicing"))
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{tmp_path / 'inv.py'}: host node-1: gpu_sharring = 'time-slicing': is not a gpuready knob: did you mean "
        "gpu_sharing?"
    ), problems


def test_data_of_a_users_own_is_refused_unless_extra_data_keys_lists_it(tmp_path):
    problems = problems_of(write_inventory(tmp_path, pool="a"))
    assert len(problems) == 1 and "host node-1: pool = 'a': is not a gpuready knob" in problems[0], problems
    assert "extra_data_keys" in problems[0]
    # (a new directory each: pyinfra caches the code of an inventory file by its path)
    (tmp_path / "listed").mkdir()
    assert load_fleet(write_inventory(tmp_path / "listed", pool="a", extra_data_keys=["pool"]))
    # pyinfra's own data (its SSH connector's, its global arguments) is left alone
    (tmp_path / "pyinfra").mkdir()
    pyinfra_own = {"ssh_user": "ubuntu", "ssh_port": 2222, "_sudo": True, "_sudo_user": "root"}
    assert load_fleet(write_inventory(tmp_path / "pyinfra", **pyinfra_own))


def test_an_inventory_without_group_data_gets_the_registrys_defaults(tmp_path):
    """The @deploy tasks in a user's own deploy elsewhere: no inventory/group_data/all.py beside the inventory."""
    data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN}
    path = tmp_path / "inv.py"
    path.write_text(f"hosts = [('node-1', {data!r})]\n")
    node = load_fleet(path).nodes["node-1"]
    assert node.versions.driver == KNOBS["nvidia_driver_version"].default
    assert node.repos["kubernetes_repo_url"] == KNOBS["kubernetes_repo_url"].default
    assert node.knobs["mig_destroy_in_use"] is False
    assert [str(t) for t in node.taints] == KNOBS["node_taints"].default


def test_the_deploy_tasks_carry_their_defaults():
    from gpuready.deploy import tasks

    for name in tasks.__all__:  # what a deploy of a user's own imports: from gpuready.deploy.tasks import ...
        defaults = getattr(tasks, name)._inner.deploy_data  # pyinfra's @deploy(data_defaults=...)
        assert defaults == knobs.defaults("deploy"), name
