"""The lab's node agent (see agent.py): the kubelet of virtual nodes and their GPU behaviour, on the real control plane."""
