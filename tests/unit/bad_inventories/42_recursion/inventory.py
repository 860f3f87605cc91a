# expect: RecursionError, inventory.py:3
def hosts(n):
    return hosts(n + 1)


pool = hosts(0)
