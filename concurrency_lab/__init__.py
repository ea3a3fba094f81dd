"""The installed concurrency-lab: a launcher, and the lab's own packages in a private `lib/`.

The lab's packages have short, generic names (`lab`, `servers`, `loadgen`, `analysis`,
`experiments`). An installed wheel keeps them out of site-packages, where they could shadow or be
shadowed by other distributions: they live in `concurrency_lab/lib/`, which only the `lab` command
(`concurrency_lab.launch`) and the children it starts put on their Python path.
"""
