"""Load generation: locust as the engine, HdrHistogram for latency, one process per step."""
