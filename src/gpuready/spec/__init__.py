"""The fleet spec, the bridge between the two sides: the knobs (:mod:`.knobs`), the model of a node and every
expectation derived from it (:mod:`.model`), and reading and validating an inventory (:mod:`.inventory`).

The deploy side and the conformance side both import this package and never each other.
"""

from gpuready.spec.inventory import (
    Problem,
    fleet_from_inventory,
    group_problems,
    load_fleet,
    parse_data_overrides,
)
from gpuready.spec.model import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DIAG_FLOOR_KEYS,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    IMAGE_KNOBS,
    SHARING_MODES,
    Diag,
    Fleet,
    Images,
    Join,
    NodeSpec,
    Sharing,
    SpecError,
    UpgradePolicy,
    Versions,
    render_yaml,
)

__all__ = [
    "DEVICE_PLUGIN_CONFIG_LABEL",
    "DIAG_FLOOR_KEYS",
    "GPU_PRESENT_LABEL",
    "GPU_RESOURCE",
    "IMAGE_KNOBS",
    "SHARING_MODES",
    "Diag",
    "Fleet",
    "Images",
    "Join",
    "NodeSpec",
    "Problem",
    "Sharing",
    "SpecError",
    "UpgradePolicy",
    "Versions",
    "fleet_from_inventory",
    "group_problems",
    "load_fleet",
    "parse_data_overrides",
    "render_yaml",
]
