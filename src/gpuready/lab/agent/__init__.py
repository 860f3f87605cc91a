"""The lab's node agent (see agent.py): the kubelet of virtual nodes, on the real control plane."""
