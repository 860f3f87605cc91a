"""Upgrade the NVIDIA driver and container toolkit across a fleet: ``pyinfra inventory/<env>.py deploys/upgrade_driver.py``.

Change the pinned versions in the inventory (or pass ``--data nvidia_driver_version=...``), then run this. Nodes
already at the pinned versions are skipped without being cordoned. The others go in batches of
``upgrade_batch_size`` (never more than ``upgrade_max_unavailable`` out of service): cordon, drain (GPU pods only
by default, PodDisruptionBudgets honoured), stop the driver's services, install the pinned packages, reboot when
the driver changes, wait for the node to be Ready in its new boot, run the conformance host, gpu, node and
workloads layers for it, and uncordon only if they pass. A node that fails stays cordoned with its failed checks
in the ``gpuready.io/upgrade-failure`` annotation, and no later batch starts. Each step is recorded in
``gpuready.io/upgrade-state``: run the deploy again after an interruption or a fix and it finishes what was left.
Conformance reports per node: ``reports/upgrade/<node>/``. The run ends with what became of every node (upgraded,
skipped, failed and why, not started, stopped at a step), also written to ``reports/upgrade/summary.json``.
"""

from pyinfra.api import OperationError

from gpuready.conformance import SUITE_DIR
from gpuready.deploy.upgrade import PlanError
from gpuready.deploy.upgrade.tasks import rolling_upgrade, upgrade_plan

try:  # decided once, before any change: unreachable cluster, unjoined or driverless nodes stop the run here
    upgrade_plan()
except (PlanError, OperationError) as exc:
    raise SystemExit(f"gpuready: {exc}") from None

rolling_upgrade(SUITE_DIR)
