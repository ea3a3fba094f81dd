"""The profiled steps read back (`lab run --profile`): a flame graph each, where a change moved
the time (`flame`)."""
