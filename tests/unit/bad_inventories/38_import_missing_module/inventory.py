# expect: ModuleNotFoundError, inventory.py:3
# hosts come from a company module that is not installed on this machine
from acme_cmdb import gpu_hosts

pool = gpu_hosts()
