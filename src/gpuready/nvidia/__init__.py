"""NVIDIA knowledge shared by the deploys, the conformance suite and the lab emulators."""
