"""Processes and the machine: start, pin and stop children, sample CPU and memory, check
addresses, capture the environment, find interpreters, the lab's own small HTTP client."""
