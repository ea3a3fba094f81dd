"""Every reproducible experiment by its command-line name, in the order the README presents them."""

from experiments import coroutines_vs_threads, pool_overhead
from experiments.common import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e for e in (pool_overhead.EXPERIMENT, coroutines_vs_threads.EXPERIMENT)
}
