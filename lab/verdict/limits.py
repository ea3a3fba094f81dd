"""What each limit means, and the docs' tables rendered from the rules (in precedence order)."""

from __future__ import annotations

from lab.verdict.table import RULES

LIMITS: dict[str, str] = {
    "errors": "failed requests (refused, reset, timeouts, 5xx, dropped) decided the figures, or "
    "nothing was answered",
    "upstream": "the upstream (the lab's own) answered slower than its configured delay, woke "
    "late or went down: the model waited on it, not on itself",
    "fault": "the server died or hung, the generator failed, or the step was cut short",
    "concurrency_cap": "requests in flight plateaued below the offered load: a pool (threads, "
    "greenlets, connections) is full and the rest queue; the reason names the knob, or says "
    "that none explains it",
    "memory": "the server's memory approached the machine's",
    "front": "nginx in front of the server ran out (its CPU, its worker_connections, its file "
    "descriptors or its keepalive pool): the front, not the model behind it, set the figures",
    "server_cpu": "the server's cores were busy: more concurrency cannot help, more cores or "
    "less CPU per request can; where the lab's apparatus was full as well (the rule "
    "`both_full`) the step is compared on nothing",
    "database": "a database the lab started for the app (PostgreSQL, Redis) was busy: "
    "requests queued in it, whatever the server's model; its CPU per request is in the step",
    "host_cpu": "the lab's apparatus ran out of CPU on a machine whose cores were all busy: "
    "more generators on it cannot help; generators on another machine can",
    "connections": "a new TCP connection per request: the server closes each connection after "
    "its response, so every request pays a connect, an accept and a close in the generators "
    "and the kernel; the apparatus ran out doing that",
    "apparatus": "the load generator or the upstream (the lab's own apparatus) ran out of CPU "
    "or woke late: the figures are the lab's limit, not the model's",
    "host_busy": "other processes took CPU the server or the apparatus needed: the figures are "
    "the machine's, not the model's",
    "stall": "the server almost stopped answering for whole seconds while requests waited (a "
    "pause, a lock, a restarted worker): its throughput counts, its tail is never compared",
    "pause": "the server stopped answering for a fraction of a second or more, again and again, "
    "seen per 100 ms (a GC, a lock, a blocking call): its count, lengths and period are in the "
    "evidence, and its p99 (the held requests counted) is compared",
    "unknown": "throughput stayed under the ideal with no resource saturated and no cap found: "
    "the cause was not found (the reason gives the figures)",
    "none": "throughput tracks the ideal (users / delay, or the arrival rate): nothing ran out",
}
TITLES = {
    "errors": "errors",
    "upstream": "the upstream",
    "fault": "a fault",
    "concurrency_cap": "a concurrency cap",
    "memory": "memory",
    "front": "the front (nginx)",
    "server_cpu": "server CPU",
    "database": "the app's database",
    "host_cpu": "the host's cores",
    "connections": "a new connection per request",
    "apparatus": "the lab's apparatus",
    "host_busy": "a busy machine",
    "stall": "a stall",
    "pause": "pauses",
    "unknown": "a cause not found",
    "none": "nothing",
}
# The limits that are the lab's own (its apparatus, the machine it runs on), not the model's:
# those only lab-limited rules name (`both_full` names the server's CPU, the model's limit too).
LABS_OWN = frozenset(rule.limit for rule in RULES) - frozenset(
    rule.limit for rule in RULES if rule.flag != "lab_limited"
)
EFFECTS = {
    "excluded": "compared on nothing",
    "tail": "throughput compared, p99 not",
    "compared": "compared",
}


def markdown_table() -> str:
    """The limits as a Markdown table, in the order their first rule applies."""
    rows = ["| limited_by | meaning |", "|---|---|"]
    order = dict.fromkeys(rule.limit for rule in RULES)
    return "\n".join(rows + [f"| `{name}` | {LIMITS[name]} |" for name in order])


def rules_table() -> str:
    """The rules as a Markdown table, in precedence order, with the live thresholds."""
    rows = [
        "| # | rule | fires when | limited_by | comparison | advice |",
        "|---|---|---|---|---|---|",
    ]
    rows += [
        f"| {i} | `{r.name}` | {r.when} | `{r.limit}` | {EFFECTS[r.effect]} | {r.advice or '-'} |"
        for i, r in enumerate(RULES, 1)
    ]
    return "\n".join(rows)
