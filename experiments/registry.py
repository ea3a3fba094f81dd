"""Every reproducible experiment by its command-line name, in the order docs/reproductions.md
shows them."""

from experiments import (
    brownout,
    coroutines_vs_threads,
    mixpanel,
    pool_overhead,
    uwsgi_blog,
    uwsgi_blog_postgres,
)
from experiments.common import Experiment

ORDER = (pool_overhead, coroutines_vs_threads, mixpanel, uwsgi_blog, uwsgi_blog_postgres, brownout)
EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in map(Experiment.of_module, ORDER)}
