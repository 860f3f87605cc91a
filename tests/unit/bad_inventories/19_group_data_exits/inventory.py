# expect: sys.exit, cluster.py:5
cluster = ["c-1"]
