"""What a real kubelet needs of ``gpuready manifests`` (issue #30 item 2, found running the Job on a real-kubelet
lab host: tests/lab/test_lab_real_suite_job.py)."""

from __future__ import annotations

import yaml

from gpuready import __version__, cli
from gpuready.conformance import manifests


def by_kind(objects):
    return {o["kind"]: o for o in objects}


def containers(objects):
    kinds = by_kind(objects)
    return [
        kinds["Job"]["spec"]["template"]["spec"]["containers"][0],
        kinds["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0],
    ]


def test_the_default_image_is_this_release_not_latest(capsys):
    """':latest' makes the API server default imagePullPolicy to Always: the kubelet pulls on every run, and a
    node with the image loaded but no registry (air-gapped, kind load, the lab) fails ErrImagePull."""
    for container in containers(manifests.render()):
        assert container["image"] == f"gpuready:{__version__}"
        assert not container["image"].endswith(":latest")
    assert manifests.sonobuoy_plugin()["spec"]["image"] == f"gpuready:{__version__}"
    assert cli.main(["manifests"]) == 0
    printed = [c["image"] for c in containers(list(yaml.safe_load_all(capsys.readouterr().out)))]
    assert printed == [f"gpuready:{__version__}"] * 2


def test_the_taint_can_be_asked_for(capsys):
    """The verdict's taint (--taint-failed, capped by --taint-max-fraction) was out of the manifests' reach."""
    argv = manifests.command(["host", "gpu"], write_back=True, taint=1.0)
    assert argv[-4:] == ["--write-back", "--taint-failed", "--taint-max-fraction", "1"]
    assert "--taint-failed" not in manifests.command(["host", "gpu"], write_back=True)
    assert cli.main(["manifests", "--layers", "host,gpu", "--write-back", "--taint-failed",
                     "--taint-max-fraction", "0.25"]) == 0  # fmt: skip
    for container in containers(list(yaml.safe_load_all(capsys.readouterr().out))):
        assert container["command"][-3:] == ["--taint-failed", "--taint-max-fraction", "0.25"]


def test_the_taint_needs_the_write_back(capsys):
    assert cli.main(["manifests", "--taint-failed"]) == 2
    assert "--write-back" in capsys.readouterr().err
