"""Sources of the emulated NVIDIA tools installed into lab hosts.

The modules here run inside Debian lab hosts that have only the python3 standard library, so none of
them imports gpuready; packages.py copies them into .deb files. Keeping them a package lets setuptools
ship them with gpuready and lets tests run them straight from the source tree.
"""
