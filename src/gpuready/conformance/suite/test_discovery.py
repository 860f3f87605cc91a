"""With ``--discover``: the expectations the suite built from the cluster agree with each other and with the nodes.

Run first (host layer), so a node whose declarations contradict each other, or cannot be read at all, fails for that
reason before the checks that judge it by them. The judging is pure, in :mod:`gpuready.spec.discovery`: the labels agree with each other,
the allocatable and the device plugin's config; the labels say what ``nvidia-smi`` says; the node runs its pool's
driver and toolkit (the pool's majority, or ``--expect-driver`` / ``--expect-toolkit``). Without ``--discover``
these checks are deselected: an inventory is the expectation.
"""

import pytest

from gpuready.conformance.plugin import judge

pytestmark = [pytest.mark.host, pytest.mark.discover]


def test_expectations_read(node, gpuready_suite):
    """The cluster declares this GPU node readably (GFD's labels, or nvidia-smi through its probe): a node whose
    expectations cannot be read is in the run all the same, and fails here naming why, never left out."""
    judge(node, gpuready_suite.discovery.of, node.name, "discovery")


def test_labels_agree(node, gpuready_suite):
    judge(node, gpuready_suite.discovery.of, node.name, "labels")


def test_labels_match_nvidia_smi(node, gpuready_suite):
    judge(node, gpuready_suite.discovery.of, node.name, "nvidia-smi")


def test_versions_match_pool(node, gpuready_suite):
    judge(node, gpuready_suite.discovery.of, node.name, "pool")
