"""pyinfra config for gpuready's deploys (pyinfra runs it first): refuse a bad inventory before connecting."""

from gpuready.deploy.pyinfra_config import install

install()
