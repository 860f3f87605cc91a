"""The lab's node agent (see agent.py): emulated kubelets' pod half and GPU behaviour on the real control plane."""
