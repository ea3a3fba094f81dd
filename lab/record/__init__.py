"""The record, at the bottom: step records, flags, run directories, errors, histogram files.

Imports nothing of the lab above it, so analysis/, experiments/, loadgen/ and the web UI can all
read and write results without pulling in the run sequence."""
