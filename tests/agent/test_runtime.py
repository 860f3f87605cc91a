"""The agent's default container runtime: a few public images run their real commands, others cannot be pulled."""

from __future__ import annotations

from gpuready.lab.agent.runtime import CatalogueRuntime, normalize_image


def test_catalogue_runtime() -> None:
    rt = CatalogueRuntime()
    plan = rt.plan(
        {},
        {
            "image": "busybox",
            "args": ["sh", "-c", "echo a; sleep 2; echo $X; exit 4"],
            "env": [{"name": "X", "value": "b"}],
        },
        None,
    )
    assert (plan.logs, plan.exit_code, plan.run_seconds) == ("a\nb\n", 4, 2.0)
    assert rt.plan({}, {"image": "registry.k8s.io/pause:3.10"}, None).exit_code is None
    missing = rt.plan({}, {"image": "busybox", "command": ["nvidia-smi"]}, None)
    assert (missing.exit_code, missing.reason) == (128, "StartError")
    pull = rt.plan({}, {"image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}, None)
    assert [w[1] for w in pull.waiting] == ["ErrImagePull", "ImagePullBackOff"]
    assert "lookup nvcr.io: no such host" in pull.waiting[0][2]
    assert normalize_image("library/busybox") == ("docker.io/library/busybox", "latest")
    assert normalize_image("localhost:5000/x:1") == ("localhost:5000/x", "1")


def test_a_placeholder_image_runs_until_deleted_whatever_its_command() -> None:
    """The scale bench's add-ons: a placeholder named for the add-on runs on a virtual node; NVIDIA's own image
    of the same add-on cannot be pulled there (only the lab's real hosts run NVIDIA's software)."""
    rt = CatalogueRuntime()
    plan = rt.plan({}, {"image": "localhost/gpuready-lab/k8s-device-plugin:bench", "command": ["x"]}, None)
    assert (plan.exit_code, plan.waiting, plan.logs) == (None, [], "")
    assert plan.image_id == "localhost/gpuready-lab/k8s-device-plugin:bench"
    real = rt.plan({}, {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"}, None)
    assert [w[1] for w in real.waiting] == ["ErrImagePull", "ImagePullBackOff"]
