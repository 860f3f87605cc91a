"""The deploy side: pyinfra facts, operations and @deploy tasks, the add-ons, the rolling upgrade.

It never imports the conformance side (an import contract in pyproject.toml says so). Its dependencies are the
``gpuready[deploy]`` extra: importing it without them raises :class:`gpuready.extras.MissingExtra` naming the extra.
"""

from gpuready.extras import require

require("deploy", "gpuready.deploy (the deploys)")
