"""Child process of `coroutines-vs-threads`: one model, one task type, all repeats; JSON lines out.

Usage: python -m experiments.cvt_child {coroutines|threads|processes} TASK --tasks 100
       --repeats 30 --sleep-s 5 --zero-sleeps 10000 --squares 1000000 --start-method spawn

The protocol is SuperFastPython's (2023): threads and processes are created, started and joined;
coroutines are created as tasks and gathered; each repeat is timed with perf_counter around all
of that. A blocking task body (time.sleep(0) loops, the list of squares) is blocking in every
model, coroutines included, exactly as in the original.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import multiprocessing
import random
import resource
import threading
import time
from collections.abc import Callable

TASKS = ("fixed_sleep", "random_sleep", "empty", "zero_sleeps", "squares")


def body(task: str, arg: float) -> Callable[[], None]:
    """The blocking task body for threads and processes (module level, so spawn can pickle it)."""
    return {
        "fixed_sleep": lambda: time.sleep(arg),
        "random_sleep": lambda: time.sleep(arg),
        "empty": lambda: None,
        "zero_sleeps": lambda: zero_sleeps(int(arg)),
        "squares": lambda: squares(int(arg)),
    }[task]


def zero_sleeps(n: int) -> None:
    for _ in range(n):
        time.sleep(0)


def squares(n: int) -> None:
    _ = [i * i for i in range(n)]


def run_body(task: str, arg: float) -> None:
    body(task, arg)()


async def coroutine(task: str, arg: float) -> None:
    if task.endswith("_sleep"):
        await asyncio.sleep(arg)
    else:
        body(task, arg)()


async def gather(task: str, args: list[float]) -> None:
    await asyncio.gather(*(asyncio.create_task(coroutine(task, a)) for a in args))


def run_coroutines(task: str, args: list[float], _: str) -> float:
    start = time.perf_counter()
    asyncio.run(gather(task, args))
    return time.perf_counter() - start


def run_threads(task: str, args: list[float], _: str) -> float:
    start = time.perf_counter()
    workers = [threading.Thread(target=run_body, args=(task, a)) for a in args]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def run_processes(task: str, args: list[float], start_method: str) -> float:
    ctx = multiprocessing.get_context(start_method)
    start = time.perf_counter()
    workers = [ctx.Process(target=run_body, args=(task, a)) for a in args]  # type: ignore[attr-defined]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


RUNNERS = {"coroutines": run_coroutines, "threads": run_threads, "processes": run_processes}


def task_args(task: str, n: int, a: argparse.Namespace, rng: random.Random) -> list[float]:
    match task:
        case "fixed_sleep":
            return [a.sleep_s] * n
        case "random_sleep":
            return [a.sleep_s * rng.random() for _ in range(n)]
        case "zero_sleeps":
            return [float(a.zero_sleeps)] * n
        case "squares":
            return [float(a.squares)] * n
    return [0.0] * n


def counters() -> dict[str, float]:
    """CPU seconds and context switches so far, this process's and its reaped children's: what
    a repeat's wall time was spent on (CPU work, waiting for a CPU, or waking up after a wait)."""
    own, kids = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return {
        "cpu_s": sum(r.ru_utime + r.ru_stime for r in (own, kids)),
        "ctx_switches": sum(r.ru_nvcsw + r.ru_nivcsw for r in (own, kids)),
    }


def timer_slack_ns() -> int:
    """prctl(PR_GET_TIMERSLACK): how late Linux may wake a sleep of this process, in ns."""
    return int(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))


def set_timer_slack(ns: int) -> None:
    """prctl(PR_SET_TIMERSLACK): Linux rounds every sleep up by this slack (default 50 µs), which
    is what a time.sleep(0) costs here; threads and processes created after inherit it."""
    if ctypes.CDLL(None, use_errno=True).prctl(29, ns, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_TIMERSLACK) failed")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=list(RUNNERS))
    ap.add_argument("task", choices=TASKS)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--sleep-s", type=float, default=5.0)
    ap.add_argument("--zero-sleeps", type=int, default=10_000)
    ap.add_argument("--squares", type=int, default=1_000_000)
    ap.add_argument("--start-method", default="spawn")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timer-slack-ns", type=int, default=0, help="0 keeps the system default")
    a = ap.parse_args()
    if a.timer_slack_ns:
        set_timer_slack(a.timer_slack_ns)
    rng = random.Random(a.seed)
    slack = timer_slack_ns()
    for repeat in range(1, a.repeats + 1):
        args = task_args(a.task, a.tasks, a, rng)
        before = counters()
        seconds = RUNNERS[a.model](a.task, args, a.start_method)
        after = counters()
        ideal = max(args) if a.task.endswith("_sleep") else 0.0
        print(
            json.dumps(
                {
                    "model": a.model,
                    "task": a.task,
                    "repeat": repeat,
                    "seconds": seconds,
                    "ideal_s": ideal,
                    "excess_s": seconds - ideal,
                    **{k: round(after[k] - before[k], 6) for k in after},
                    "timer_slack_ns": slack,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
