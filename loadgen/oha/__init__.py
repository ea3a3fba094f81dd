"""oha as the engine of an open-loop step: `python -m loadgen.oha START_JSON` (`driver`) speaks the
lab's generator protocol with oha sending the requests; `figures` turns oha's records into the
lab's (`lab.run.engine` chooses the engine of each step)."""
