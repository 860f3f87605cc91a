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
