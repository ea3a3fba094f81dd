"""oha as the engine of an open- or closed-loop step: `python -m loadgen.oha START_JSON`
(`driver`) speaks the lab's generator protocol with oha sending the requests; `figures` turns
oha's records into the lab's; a step's shares on other machines run on their own oha and send
their records after the window (`remote`, `wire`). `lab.run.engine` chooses the engine of each
step."""
