"""How a rank waits for its collectives on a CPU: asleep (the default of torch.distributed) or spinning.

A rank of a CPU run that reaches a collective before its peers sleeps in it; its core idles, and on a virtual
machine the idle core is halted and must be woken when the data arrives, so the collective takes longer and the
rank's next work runs on a cold core. A GPU rank does not pay this (its device stays busy or idles at full
clock). Spinning (polling the request until it completes) keeps the core awake, as calibrate's back-to-back
timings have it, when every rank has a core of its own; with more ranks (times threads) than cores it would
take the core from a peer that has work to do, so it is off there. The spin yields the core at every poll
(``sched_yield``): the collective's own work runs on gloo's threads in the same process, and a spin that never
yields holds the core from them until the scheduler preempts it (on two cores, ranks-skewed8's ILP plan:
median steps 6.3-7.4 ms, p90 12-15 ms, without yielding; 5.1-6.8 ms, p90 6.8-10.5 ms, yielding).

``PLACER_SPIN_WAIT=1`` / ``=0`` forces it on or off; ``configure`` sets the process's choice once (the worker,
calibrate's collective timings), ``wait`` waits for one request (a ``torch.distributed`` Work).
"""
from __future__ import annotations

import os

from placer.executor import usable_cores

#: the environment variable that forces spinning on (1) or off (0)
SPIN_ENV = "PLACER_SPIN_WAIT"

_spin = False


def spin_wanted(device_type: str, local_ranks: int, threads: int) -> bool:
    """Whether ranks of ``device_type`` spin: on a CPU when every rank's threads have cores of their own."""
    forced = os.environ.get(SPIN_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    return device_type == "cpu" and local_ranks * max(threads, 1) <= usable_cores()


def configure(spin: bool) -> None:
    global _spin
    _spin = bool(spin)


def spinning() -> bool:
    return _spin


def wait(work) -> None:
    """Wait for ``work`` (an async collective's request): spinning on ``is_completed`` when configured."""
    if _spin:
        while not work.is_completed():
            os.sched_yield()  # the core to any thread that can run (the rank's own gloo threads), else spin on
    work.wait()


def barrier(group=None) -> None:
    """``torch.distributed.barrier`` on ``group``, waited for as ``wait`` waits."""
    import torch.distributed as dist

    wait(dist.barrier(group=group, async_op=True))
