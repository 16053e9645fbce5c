"""How CPU ranks wait (runner/waiting.py): spinning only where every rank has cores of its own, or as forced."""
import pytest

from placer.executor import usable_cores
from placer.runner import waiting


class _Work:
    def __init__(self, polls: int):
        self.polls, self.waited = polls, False

    def is_completed(self) -> bool:
        self.polls -= 1
        return self.polls <= 0

    def wait(self) -> None:
        self.waited = True


def test_spin_only_on_a_cpu_with_a_core_per_rank(monkeypatch):
    monkeypatch.delenv(waiting.SPIN_ENV, raising=False)
    cores = usable_cores()
    assert waiting.spin_wanted("cpu", cores, 1)
    assert not waiting.spin_wanted("cpu", cores + 1, 1)
    assert not waiting.spin_wanted("cpu", 1, cores + 1)
    assert not waiting.spin_wanted("cuda", 1, 1)


@pytest.mark.parametrize("forced, want", [("1", True), ("0", False)])
def test_the_environment_forces_it(monkeypatch, forced, want):
    monkeypatch.setenv(waiting.SPIN_ENV, forced)
    assert waiting.spin_wanted("cpu", 10**6, 1) is want and waiting.spin_wanted("cuda", 1, 1) is want


def test_wait_polls_when_spinning_and_always_waits():
    try:
        waiting.configure(True)
        w = _Work(5)
        waiting.wait(w)
        assert w.polls == 0 and w.waited
        waiting.configure(False)
        w = _Work(5)
        waiting.wait(w)
        assert w.polls == 5 and w.waited
    finally:
        waiting.configure(False)
