"""``service.parse_processes``: batches parsed in forked children give exactly the answers of the server's own
threads; a child that dies or hangs fails no request that could still be answered and is replaced; what the
children cannot parse (a model they do not hold) stays in the server; the children of a killed server exit."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import MODELS, TAGS, WORDS, WORDS2, ServerProcess, settings

import service.parse_processes as parse_processes
import service.settings as service_settings
from engine.model.widen import is_widened
from service import parsing
from service.parse_batch import ParseWork, run_batch
from service.parse_processes import ParseProcesses
from service.problems import ProblemError
from service.registry import ModelRegistry
from service.schemas import ParseRequest
from service.settings import Settings, usable_cores

DEADLINE = 60.0


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    reg = ModelRegistry(MODELS, tmp_path_factory.mktemp("trained"), "en_ewt")
    reg.load_shipped()
    return reg


def works(registry: ModelRegistry, tmp: Path) -> list[ParseWork]:
    """A batch of the default model: untagged words (tagged with 16 tag samples), tagged words, LEMMA and FEATS
    filled, and a request its check refuses (422)."""
    entry = registry.get(None)
    s = settings(tmp)
    bodies = [ParseRequest(tokens=[WORDS], inference={"tag_samples": 16}),
              ParseRequest(tokens=[WORDS2, WORDS], inference={"tag_samples": 16}),
              ParseRequest(tokens=[["bad\tword"]], inference={"tag_samples": 16})]
    return [ParseWork(b, entry, parsing.parse_json, s, morphology=True) for b in bodies]


@pytest.fixture()
def pool(registry: ModelRegistry) -> Iterator[ParseProcesses]:
    processes = ParseProcesses(2, registry.entries, timeout_s=DEADLINE)
    processes.start()
    try:
        yield processes
    finally:
        processes.stop()


def same(outcomes: list[Any], expected: list[Any]) -> None:
    assert len(outcomes) == len(expected)
    for got, want in zip(outcomes, expected, strict=True):
        if isinstance(want, ProblemError):
            assert isinstance(got, ProblemError) and vars(got) == vars(want)
        else:
            assert got == want  # the same code on the same batch: equal to the last bit


def test_a_batch_parsed_in_a_child_equals_the_server_threads_answer(pool: ParseProcesses, registry: ModelRegistry,
                                                                    tmp_path: Path) -> None:
    batch = works(registry, tmp_path)
    expected = run_batch(batch)
    assert isinstance(expected[2], ProblemError) and expected[2].status == 422
    assert pool.alive == 2
    for _ in range(3):  # both children, more than once
        same(pool.run(batch), expected)


def test_the_loaded_weights_stay_as_stored_through_loading_and_parsing(registry: ModelRegistry,
                                                                      tmp_path: Path) -> None:
    """What the forked children share with the server is the models as stored: neither loading nor a batch of
    /parse widens the parser's weights or pruner to float64 (``engine.model.widen``: 170 MB per process)."""
    parser = registry.get(None).pipeline.parser
    run_batch(works(registry, tmp_path))
    assert not is_widened(parser, "weights") and not is_widened(parser, "pruner")


def test_the_sentence_counts_reach_the_servers_metrics(pool: ParseProcesses, registry: ModelRegistry,
                                                      tmp_path: Path) -> None:
    seen: list[int] = []
    batch = [ParseWork(w.req, w.entry, w.build, w.settings, observe=seen.append, morphology=True)
             for w in works(registry, tmp_path)]
    pool.run(batch)
    assert seen == [len(WORDS), len(WORDS2), len(WORDS)]


def test_a_killed_child_fails_nothing_and_is_replaced(pool: ParseProcesses, registry: ModelRegistry,
                                                     tmp_path: Path) -> None:
    batch = works(registry, tmp_path)
    expected = run_batch(batch)
    victims = {c.process.pid for c in pool._children}
    for child in list(pool._children):
        os.kill(child.process.pid, signal.SIGKILL)
        child.process.join(DEADLINE)  # dead before the batch is sent
    for _ in range(2):  # each dead child is found by a batch, which the server parses itself
        same(pool.run(batch), expected)
    assert pool.alive == 2 and not victims & {c.process.pid for c in pool._children}
    same(pool.run(batch), expected)  # the new children parse


def test_a_child_that_hangs_is_killed_after_the_time_budget_and_replaced(
        registry: ModelRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(works: list[Any], observe: bool = True) -> list[Any]:
        time.sleep(3600)
        return []

    monkeypatch.setattr(parse_processes, "parse_works", hang)  # before the fork: the children inherit it
    processes = ParseProcesses(1, registry.entries, timeout_s=0.5)
    processes.start()
    try:
        first = processes._children[0].process
        outcomes = processes.run(works(registry, tmp_path))
        assert all(isinstance(o, TimeoutError) for o in outcomes) and len(outcomes) == 3
        first.join(DEADLINE)
        assert first.exitcode == -signal.SIGKILL
        assert processes.alive == 1 and processes._children[0].process.pid != first.pid
    finally:
        processes.stop()


def test_what_the_children_do_not_hold_is_parsed_in_the_server(registry: ModelRegistry, tmp_path: Path) -> None:
    ran: list[int] = []

    def fallback(batch: list[Any]) -> list[Any]:
        ran.append(len(batch))
        return run_batch(batch)

    processes = ParseProcesses(1, lambda: [], timeout_s=DEADLINE, fallback=fallback)  # forked holding no model
    processes.start()
    try:
        batch = works(registry, tmp_path)
        assert not processes.handles(batch)
        same(processes.run(batch), run_batch(batch))
        assert ran == [3]
    finally:
        processes.stop()


def server_children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.slow
def test_the_real_server_parses_in_its_children_which_exit_with_it(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", workers=0, env={"PARSER_PARSE_PROCESSES": "2"})
    try:
        server.wait_ready()
        assert server.proc is not None
        children = server_children(server.proc.pid)
        assert len(children) == 2
        r = httpx.post(server.url + "/parse", json={"tokens": [WORDS], "tags": [TAGS]}, timeout=DEADLINE)
        assert r.status_code == 200 and len(r.json()["sentences"][0]["tokens"]) == len(WORDS)
        metrics = httpx.get(server.url + "/metrics", timeout=DEADLINE).text
        assert "parser_parse_processes 2.0" in metrics
        os.kill(server.proc.pid, signal.SIGKILL)  # no clean shutdown: the children see their pipes close
        server.proc.wait(DEADLINE)
        deadline = time.monotonic() + DEADLINE
        while any(Path(f"/proc/{c}").exists() and "Z" not in _state(c) for c in children):
            assert time.monotonic() < deadline, f"parse processes {children} outlived their server"
            time.sleep(0.1)
    finally:
        server.stop()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.parametrize(("cpu_max", "limit"), [("max 100000\n", None), ("150000 100000\n", 2),
                                                ("50000 100000\n", 1), ("garbage", None)])
def test_the_default_count_follows_the_affinity_and_the_cgroup_quota(tmp_path: Path, cpu_max: str,
                                                                     limit: int | None) -> None:
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text(cpu_max)
    assert usable_cores(tmp_path / "cpu.max") == min(affinity, limit or affinity)
    assert usable_cores(tmp_path / "absent") == affinity


def test_the_default_forks_only_on_linux_and_a_platform_without_fork_is_told_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_settings, "FORK_DEFAULT", False)
    assert Settings().parse_processes == 0
    monkeypatch.setattr(service_settings.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(ValueError, match="cannot fork"):
        Settings(parse_processes=2)
    assert Settings(parse_processes=0).parse_processes == 0


def test_after_stop_nothing_is_forked_and_batches_are_parsed_in_the_server(registry: ModelRegistry,
                                                                            tmp_path: Path) -> None:
    processes = ParseProcesses(1, registry.entries, timeout_s=DEADLINE)
    processes.start()
    child = processes._children[0]
    processes.stop()
    child.process.join(DEADLINE)
    assert child.process.exitcode == 0  # its pipe closed: it left its loop
    processes._fork()  # what a batch thread that lost its child at shutdown would ask for
    assert processes.alive == 0 and not processes._children
    batch = works(registry, tmp_path)
    same(processes.run(batch), run_batch(batch))
