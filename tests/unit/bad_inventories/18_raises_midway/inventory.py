# expect: RuntimeError, inventory.py:7
def cmdb():
    # the asset database is down
    return None


raise RuntimeError("CMDB returned no rows") if cmdb() is None else None
