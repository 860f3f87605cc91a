# expect: diag_dcgm_level
# Pool data lives in group_data/acceptance.py, hosts are bare names.
acceptance = ["accept-01", "accept-02"]
