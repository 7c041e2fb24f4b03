"""What the guardian remembers per target: new, restarted, gone, forgotten; the snapshotted tree."""

from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target
from vllm_guardian.state.tracker import Tracker

API = ProcKey(100, 5000)
ENGINE = ProcKey(101, 5010)
WORKER = ProcKey(102, 5020)


def proc(key, role, ppid=1):
    return ProcessInfo(key, ppid, role, ("x",))


def target(key=API, procs=None, name="vllm-8000", source="autodiscover"):
    procs = procs if procs is not None else (proc(key, Role.API_SERVER), proc(ENGINE, Role.ENGINE_CORE, key.pid))
    return Target(name, key, tuple(procs), 8000, "http://127.0.0.1:8000", source)


def test_a_new_target_starts_in_its_startup_grace():
    tr = Tracker(forget_after=60)
    ch = tr.apply_discovery((target(),), (), now=0)
    assert ch.new == ("vllm-8000",)
    st = tr.state("vllm-8000", 0, 1.0)
    assert not st.ready and not st.ever_ready and st.api_alive and st.engine_alive is True


def test_a_canary_answer_ends_the_grace():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    tr.canary_started("vllm-8000", 1)
    tr.canary_finished("vllm-8000", API, ok=True, model="m", now=2)
    st = tr.state("vllm-8000", 2, 1.0)
    assert st.ready and st.ever_ready and st.canary_in_flight_since is None
    assert tr.targets["vllm-8000"].model == "m"


def test_an_answer_from_the_previous_incarnation_does_not_make_the_new_one_ready():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    tr.apply_discovery((target(ProcKey(200, 9000)),), (), 5)
    tr.canary_finished("vllm-8000", API, ok=True, model="m", now=6)
    assert not tr.state("vllm-8000", 6, 1.0).ready


def test_a_new_api_server_identity_is_a_restart_that_keeps_ever_ready():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    tr.canary_finished("vllm-8000", API, True, "m", 1)
    ch = tr.apply_discovery((target(ProcKey(100, 7777)),), (), 5)  # same pid, new starttime: reused pid
    assert ch.restarted == ("vllm-8000",)
    st = tr.state("vllm-8000", 5, 1.0)
    assert not st.ready and st.ever_ready


def test_the_engine_vanishing_between_discoveries_is_seen_on_the_next_tick():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    assert tr.mark_gone({ENGINE}, 1) == []
    assert tr.state("vllm-8000", 1, 1.0).engine_alive is False


def test_the_api_server_vanishing_marks_the_target_gone():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    assert tr.mark_gone({API}, 3) == ["vllm-8000"]
    st = tr.state("vllm-8000", 3, 1.0)
    assert not st.api_alive and st.gone_since == 3


def test_reparented_children_stay_in_the_snapshotted_tree():
    tr = Tracker(60)
    tr.apply_discovery(
        (
            target(
                procs=(proc(API, Role.API_SERVER), proc(ENGINE, Role.ENGINE_CORE, 100), proc(WORKER, Role.WORKER, 101))
            ),
        ),
        (),
        0,
    )
    # the API server was SIGKILLed: it is gone, the engine and worker live on under init
    orphans = (proc(ENGINE, Role.ENGINE_CORE, 1), proc(WORKER, Role.WORKER, 101))
    ch = tr.apply_discovery((), orphans, 3)
    assert ch.vanished == ("vllm-8000",)
    assert {p.key for p in tr.targets["vllm-8000"].target.processes} == {ENGINE, WORKER}
    assert tr.live_targets()[0].name == "vllm-8000"


def test_a_child_orphaned_under_a_living_api_server_stays_in_its_tree():
    tr = Tracker(60)
    tr.apply_discovery(
        (
            target(
                procs=(proc(API, Role.API_SERVER), proc(ENGINE, Role.ENGINE_CORE, 100), proc(WORKER, Role.WORKER, 101))
            ),
        ),
        (),
        0,
    )
    # the engine died; its worker was re-parented to init, so discovery no longer sees it under the API server
    ch = tr.apply_discovery((target(procs=(proc(API, Role.API_SERVER),)),), (proc(WORKER, Role.WORKER, 1),), 3)
    assert ch == type(ch)()
    assert {p.key for p in tr.targets["vllm-8000"].target.processes} == {API, WORKER}
    assert tr.state("vllm-8000", 3, 1.0).engine_alive is False


def test_a_gone_autodiscovered_target_is_forgotten_after_forget_after():
    tr = Tracker(forget_after=60)
    tr.apply_discovery((target(),), (), 0)
    tr.apply_discovery((), (), 10)
    assert tr.apply_discovery((), (), 69).forgotten == ()
    assert tr.apply_discovery((), (), 70).forgotten == ("vllm-8000",)
    assert "vllm-8000" not in tr.targets


def test_a_configured_target_is_never_forgotten():
    tr = Tracker(forget_after=60)
    tr.apply_discovery((target(name="llama", source="config"),), (), 0)
    tr.apply_discovery((), (), 10)
    assert tr.apply_discovery((), (), 1000).forgotten == ()
    assert not tr.state("llama", 1000, 1.0).api_alive


def test_health_200_and_models_answered_make_a_target_ready_without_a_canary():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    assert tr.server_says_ready("vllm-8000", API, "tiny", 1)
    st = tr.state("vllm-8000", 1, 1.0)
    assert st.ready and st.ever_ready and st.ready_since == 1
    assert tr.targets["vllm-8000"].model == "tiny"


def test_the_word_of_a_previous_incarnation_does_not_make_the_new_one_ready():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    tr.apply_discovery((target(ProcKey(200, 9000)),), (), 5)
    assert not tr.server_says_ready("vllm-8000", API, "tiny", 6)
    assert not tr.state("vllm-8000", 6, 1.0).ready


def test_a_restart_starts_the_startup_clock_again():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    assert tr.state("vllm-8000", 3, 1.0).starting_since == 0
    tr.apply_discovery((target(ProcKey(200, 9000)),), (), 40)
    assert tr.state("vllm-8000", 41, 1.0).starting_since == 40


def test_the_servers_word_makes_it_ready_but_only_a_canary_answered_verifies_a_restart():
    tr = Tracker(60)
    tr.apply_discovery((target(),), (), 0)
    tr.server_says_ready("vllm-8000", API, "m", 1)
    assert tr.targets["vllm-8000"].ready and not tr.targets["vllm-8000"].answered
    tr.canary_finished("vllm-8000", API, ok=True, model="m", now=2)
    assert tr.targets["vllm-8000"].answered
    tr.apply_discovery((target(ProcKey(200, 9000)),), (), 5)  # a new incarnation starts unverified
    assert not tr.targets["vllm-8000"].answered
