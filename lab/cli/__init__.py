"""The command line, on top of everything: one module per command (or group of commands)."""
