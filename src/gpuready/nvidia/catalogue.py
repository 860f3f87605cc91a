"""The GPU model and MIG profile catalogue: one import for the spec, the deploys, the lab and the suite.

Whole-GPU facts live in :mod:`gpuready.nvidia.models`, MIG profiles and placement rules in
:mod:`gpuready.nvidia.mig`; both module docstrings say which real capture or NVIDIA document each table came
from. Import from here so callers do not depend on that split.
"""

from gpuready.nvidia.mig import (
    RESOURCE_PREFIX,
    MigProfile,
    NotMigCapableError,
    UnknownMigProfileError,
    fit_layout,
    layout_problems,
    mig_profiles,
    mig_slices,
    placement_conflicts,
)
from gpuready.nvidia.models import (
    MODELS,
    GpuModel,
    UnknownModelError,
    lookup_model,
    product_label,
    sanitise_label_part,
)

__all__ = [
    "MODELS",
    "RESOURCE_PREFIX",
    "GpuModel",
    "MigProfile",
    "NotMigCapableError",
    "UnknownMigProfileError",
    "UnknownModelError",
    "fit_layout",
    "layout_problems",
    "lookup_model",
    "mig_profiles",
    "mig_slices",
    "placement_conflicts",
    "product_label",
    "sanitise_label_part",
]
