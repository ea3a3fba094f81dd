"""concurrency-lab: which Python server concurrency model should serve an I/O-bound Flask app?"""

__version__ = "0.1.0"
