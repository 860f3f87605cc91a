"""The deploy side: pyinfra facts, operations and @deploy tasks, the add-ons, the rolling upgrade.

It never imports the conformance side (an import contract in pyproject.toml says so).
"""
