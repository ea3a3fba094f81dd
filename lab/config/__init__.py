"""Declarative configuration: the model registry, scenarios, the user's app, TOML reading."""
