"""The lab's dcgm-exporter, the one NVIDIA add-on the lab still emulates: NVIDIA's exporter reads the GPUs through
DCGM's ``libdcgm``, which the lab neither builds nor mocks.

:mod:`.server` is the image's entrypoint (HTTP, the kubelet's pod-resources mapping), :mod:`.scrape` renders the
exposition text, :mod:`.host` reads the emulated machine's files, :mod:`.dra` names DRA devices as NVIDIA's driver
does.
"""
