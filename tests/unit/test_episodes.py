"""Bad input is logged once per episode and counted every time."""

import logging

from vllm_guardian.state.episodes import EpisodeLog


def test_first_failure_logs_the_rest_only_count(caplog):
    ep = EpisodeLog(logging.getLogger("t"))
    with caplog.at_level(logging.INFO, logger="t"):
        for i in range(5):
            ep.fail("llama:metrics", "HTML page", now=float(i))
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert ep.failures_total["llama"] == 5
    assert ep.current("llama:") == {"llama:metrics": "HTML page (x5)"}


def test_recovery_is_logged_once_and_a_new_episode_logs_again(caplog):
    ep = EpisodeLog(logging.getLogger("t"))
    with caplog.at_level(logging.INFO, logger="t"):
        ep.fail("k", "bad", 0.0)
        ep.ok("k")
        ep.ok("k")
        ep.fail("k", "bad again", 1.0)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
    assert "recovered after 1 failure" in caplog.records[1].getMessage()
