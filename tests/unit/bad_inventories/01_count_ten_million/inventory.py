# expect: gpu_count
# A fleet generated with a comprehension; someone typed an exponent instead of a count.
racks = {f"r{r}": 10**7 if r == 3 else 4 for r in range(1, 5)}
h100s = [
    (
        f"gpu-{rack}-a",
        {
            "gpu_model": "h100-sxm",
            "gpu_count": n,
            "gpu_sharing": "mig",
            "mig_layout": ["7g.80gb"],
            "kube_join": False,
        },
    )
    for rack, n in racks.items()
]
