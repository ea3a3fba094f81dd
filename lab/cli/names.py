"""The command line's vocabulary: what each option name means, once, for every `lab` command.

Why: a name that means two things misleads whoever learnt it in one command (`--processes` was
generator workers in `lab generator`, upstream processes in `lab upstream`, and server processes
as a knob; `--error-rate` was the failures `lab advise` allows and the 500s the upstream injects).
tests/test_cli_options.py walks every command: each option name must be declared here, with the
commands that use it, so giving a name to another command means reading its one meaning first.
A retired spelling is a hidden `lab.cli.options.renamed` alias that warns, never listed here.
"""

from __future__ import annotations

# option -> (the commands that take it, what it means in every one of them)
MEANINGS: dict[str, tuple[str, str]] = {
    # where things listen, what may leave loopback
    "--host": ("run serve upstream", "the address the command's listeners bind"),
    "--port": ("run serve ui upstream", "the port of what the command serves (lab ui: its page)"),
    "--upstream-port": ("run", "the port of the mock upstream a run starts"),
    "--upstream-url": ("serve", "the mock upstream a server calls"),
    "--meter-port": ("serve", "the port of the meter beside a server"),
    "--allow-remote": (
        "run advise serve upstream generator",
        "permit a non-loopback address where the command would refuse one",
    ),
    # what runs, and how big
    "--scenario": ("run", "the scenario: a built-in name or a TOML file"),
    "--models": ("run advise ui", "which server models, comma separated"),
    "--models-file": ("run advise models serve", "a TOML file of extra models"),
    "--knob": ("run serve", "a server knob NAME=VALUE (processes, concurrency, ...)"),
    "--max-users": (
        "models serve ui",
        'the most simultaneous users: what "auto" knobs (concurrency, pools) resolve to',
    ),
    "--backend": ("run", "native processes or Docker containers"),
    "--python": ("run", "the interpreter the models run under"),
    "--no-pin": ("run", "do not pin processes to cores"),
    "--front": ("run advise serve ui", "nginx in front of each model, or bare"),
    "--front-knob": ("run advise serve ui", "an nginx knob NAME=VALUE"),
    "--exec": ("serve", "replace the command with the server"),
    # the load
    "--levels": ("run", "closed loop: the numbers of users, one step each"),
    "--mode": ("run", "closed or open loop"),
    "--rates": ("run", "open loop: the arrival rates, one step each"),
    "--max-outstanding": ("run", "open loop: the most requests in flight"),
    "--arrival": ("run", "open loop: how arrivals are spaced"),
    "--duration": ("run advise", "seconds measured per step"),
    "--warmup": ("run advise", "seconds of discarded warm-up per model"),
    "--trials": ("run", "repeats of every step"),
    "--route": ("run", "what each request of the lab's app does"),
    "--request-timeout": ("run", "seconds before a request counts as a timeout"),
    "--start-timeout": ("run", "seconds a server gets to start"),
    "--generators": (
        "run advise generator",
        "load-generator processes (locust workers) on this machine",
    ),
    "--remote-generators": ("run advise", "load-generator processes started on other machines"),
    "--master": ("run advise", "where the generator master listens for its workers"),
    "--connect": ("generator", "the generator master to work for"),
    "--steps": ("generator", "measured steps to serve before stopping"),
    "--log": ("generator", "where the workers' own messages go"),
    # the mock upstream
    "--delay-ms": ("run advise ui upstream", "the mock upstream's mean delay, in milliseconds"),
    "--distribution": ("upstream", "how the upstream's delays are drawn around their mean"),
    "--error-rate": ("upstream", "the share of requests the upstream answers 500"),
    "--stall-rate": ("upstream", "the share of requests the upstream stalls"),
    "--stall-ms": ("upstream", "how long a stall adds"),
    "--upstream-processes": ("upstream", "processes of the mock upstream"),
    "--engine": ("upstream", "the upstream's HTTP implementation"),
    # databases
    "--db-url": ("run", "a database of your own instead of one the lab starts"),
    "--db-driver": ("run", "the PostgreSQL driver of the lab's app"),
    # your own app
    "--app": ("run advise", "your own WSGI or ASGI app, MODULE:ATTR"),
    "--app-dir": ("run advise", "the directory to import --app from"),
    "--path": ("run advise", "a route of --app to request"),
    "--probe-path": ("run advise", "the --app route the concurrency probe requests"),
    "--access-log": ("run advise", "an access log whose top routes are --app's mix"),
    "--log-top": ("run advise", "how many of --access-log's routes make the mix"),
    "--log-methods": ("run advise", "methods that change data kept from --access-log"),
    "--body": ("run advise", "the body of --app's requests that are not GET"),
    "--header": ("run advise", "a header of every request to --app"),
    "--env": ("run advise", "a variable of --app's environment"),
    "--compare": ("run advise", "how --app's answers must match across models"),
    "--import-timeout": ("run advise", "seconds importing --app may take"),
    "--check-only": ("run", "check --app under every model, then stop"),
    # the target of lab advise
    "--rps": ("advise", "the target arrival rate"),
    "--p99-ms": ("advise", "the target p99 latency"),
    "--max-error-rate": ("advise", "the largest share of failed requests that meets the target"),
    "--budget-min": ("advise", "minutes the whole search may take"),
    # results
    "--out": ("run advise doctor reproduce ui", "the results directory run directories go in"),
    "--resume": ("run advise", "a run directory to continue"),
    "--json": ("advise doctor", "print the result as JSON on stdout"),
    "--level": ("report", "the level of the percentile-spectrum plot"),
    "--clean": ("doctor", "stop leftovers of dead runs and remove their pid files"),
    "--quick": ("reproduce", "the experiment's reduced protocol"),
    "--full": ("reproduce", "the experiment's full published size"),
    # lab itself
    "--version": ("lab", "print the version"),
}
