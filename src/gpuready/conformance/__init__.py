"""The conformance side: the pytest plugin, how it reaches nodes (runners), the workloads it runs, the
pure checks and the fleet report.

It never imports the deploy side (an import contract in pyproject.toml says so).
"""
