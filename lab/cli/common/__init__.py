"""What every command shares: option declarations and helpers, and how a command stops (signals,
Ctrl-C, exit codes, leftovers)."""
