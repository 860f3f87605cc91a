"""The node agent's crash-loop back-off follows the kubelet's (flowcontrol.Backoff(10s, 300s)): doubling to 5
minutes, and back to 10 s after a quiet spell longer than twice the maximum. Without the reset a long-lived add-on
pod that crashed a few times over a lab session waited 5 minutes on every later crash."""

from gpuready.lab.agent.kubelet import BACKOFF_INITIAL_S, BACKOFF_MAX_S, next_backoff


def test_the_first_crash_waits_ten_seconds_and_each_next_doubles_up_to_five_minutes():
    waits, last, at = [], 0.0, 0.0
    for i in range(8):
        last = next_backoff(last, at, now=float(i))
        at = float(i)
        waits.append(last)
    assert waits == [10, 20, 40, 80, 160, 300, 300, 300]


def test_a_crash_after_a_quiet_spell_longer_than_twice_the_maximum_starts_again_at_ten_seconds():
    assert next_backoff(BACKOFF_MAX_S, 0.0, now=2 * BACKOFF_MAX_S + 1) == BACKOFF_INITIAL_S
    assert next_backoff(BACKOFF_MAX_S, 0.0, now=2 * BACKOFF_MAX_S - 1) == BACKOFF_MAX_S
