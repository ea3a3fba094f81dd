"""The locust web UI's lab page, its live flags, saving a UI session as a run directory, and the
per-container meter of a server's CPU and RSS."""
