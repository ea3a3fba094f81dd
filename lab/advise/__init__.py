"""`lab advise`: the cheapest configuration per model that meets a target load, confirmed."""
