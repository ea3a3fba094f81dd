"""Reproductions of the published experiments: published figures beside this machine's figures."""
