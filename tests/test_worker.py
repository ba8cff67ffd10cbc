"""The worker process (gateway/worker/) for real: a child that runs jobs by name and answers, whose
limits (CPU seconds, memory, a wall-clock deadline) end a job with a plain reason, after which the
next job gets a fresh child; a crash, a forged answer or a cancelled caller cost one job, never the
daemon; the queue is bounded; an idle child exits; a child dies with its parent, busy or not."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import MediaError
from gateway.worker.parent import JobLimits, Worker, WorkerFailed
from gateway.worker.wire import WireError, decode, encode, rebuild, split
from tests import worker_jobs as jobs

QUICK = JobLimits(cpu_s=30, wall_s=120)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's parent may never reap it here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def until(predicate: object, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    found = Worker(memory_mb=512)
    try:
        yield found
    finally:
        await found.close()


async def test_values_go_both_ways_and_a_dataclass_comes_back_checked(worker: Worker) -> None:
    got = await worker.run(
        jobs.echo, 1, "ä", b"\x00\xff", [None, 2.5, True], {"k": b"v"}, Path("/x"), limits=QUICK
    )
    assert got == [1, "ä", b"\x00\xff", [None, 2.5, True], {"k": b"v"}, Path("/x")]
    assert await worker.run(
        jobs.sized, "n", b"abc", limits=QUICK, returns=jobs.Sized
    ) == jobs.Sized("n", b"abc", 3)
    assert worker.started == 1 and worker.pid is not None and worker.pid != os.getpid()


async def test_the_child_sees_no_secrets(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("TELEGRAM_TOKEN", "123:abc")
    env = await worker.run(jobs.env, limits=QUICK)
    assert "sk-ant-secret" not in str(env) and "123:abc" not in str(env)
    assert set(env) <= {"PATH", "LANG", "PYTHONPATH", "MALLOC_ARENA_MAX", "LC_CTYPE"}


async def test_a_jobs_refusal_comes_back_as_itself_and_the_child_lives_on(worker: Worker) -> None:
    first = await worker.run(jobs.pid, limits=QUICK)
    with pytest.raises(MediaError, match=r"^not a picture$"):
        await worker.run(jobs.refuse, "not a picture", limits=QUICK)
    with pytest.raises(WorkerFailed, match="the reader failed on it") as failed:
        await worker.run(jobs.fail, limits=QUICK)
    assert failed.value.reason == "crashed"
    assert await worker.run(jobs.pid, limits=QUICK) == first and worker.started == 1


async def test_past_its_cpu_seconds_the_child_is_ended_and_the_next_job_gets_a_new_one(
    worker: Worker,
) -> None:
    first = await worker.run(jobs.pid, limits=QUICK)
    with pytest.raises(WorkerFailed) as failed:
        await worker.run(jobs.spin, limits=JobLimits(cpu_s=1, wall_s=300))
    assert failed.value.reason == "cpu"
    assert str(failed.value) == "reading it took more than 1 s of processor time"
    await until(lambda: not alive(first))
    assert await worker.run(jobs.pid, limits=QUICK) != first and worker.started == 2


async def test_past_its_deadline_the_child_is_killed(worker: Worker) -> None:
    first = await worker.run(jobs.pid, limits=QUICK)
    with pytest.raises(WorkerFailed, match=r"reading it took longer than 0\.5 s") as failed:
        await worker.run(jobs.nap, 600, limits=JobLimits(cpu_s=30, wall_s=0.5))
    assert failed.value.reason == "time"
    await until(lambda: not alive(first))
    assert await worker.run(jobs.pid, limits=QUICK) != first


async def test_past_its_memory_the_job_fails_and_the_child_starts_afresh(worker: Worker) -> None:
    first = await worker.run(jobs.pid, limits=QUICK)
    with pytest.raises(WorkerFailed, match="needed more than the 512 MB it may use") as failed:
        await worker.run(jobs.hog, 600, limits=QUICK)
    assert failed.value.reason == "memory"
    await until(lambda: not alive(first))  # it answered, then exited: its heap is given back
    assert await worker.run(jobs.hog, 64, limits=QUICK) == 64 * 1024 * 1024
    assert worker.started == 2


@pytest.mark.parametrize("job", [jobs.crash, jobs.forge, jobs.wrong_shape])
async def test_a_crash_or_a_forged_answer_costs_one_job(
    worker: Worker, job: Callable[..., Any]
) -> None:
    """A segfault, a frame announcing 4 GB, fields of the wrong type: the job fails, that's all."""
    first = await worker.run(jobs.pid, limits=QUICK)
    with pytest.raises(WorkerFailed) as failed:
        await worker.run(job, limits=QUICK, returns=jobs.Sized)
    assert failed.value.reason == "crashed" and str(failed.value) == "the reader failed on it"
    assert await worker.run(jobs.echo, "again", limits=QUICK) == ["again"]
    if job is not jobs.wrong_shape:
        await until(lambda: not alive(first))


async def test_a_cancelled_caller_takes_its_job_down_with_it(
    worker: Worker, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    spin = worker.run(jobs.touch_and_spin, str(started), limits=QUICK)
    call = asyncio.create_task(spin)
    await until(started.exists)
    busy = int(started.read_text())
    assert worker.running == "tests.worker_jobs:touch_and_spin" and worker.pid == busy
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await until(lambda: not alive(busy))
    assert worker.running is None
    assert await worker.run(jobs.echo, "next", limits=QUICK) == ["next"]


async def test_the_queue_is_bounded(tmp_path: Path) -> None:
    worker = Worker(memory_mb=512, max_jobs=2)
    started = tmp_path / "started"
    try:
        spin = worker.run(jobs.touch_and_spin, str(started), limits=QUICK)
        running = asyncio.create_task(spin)
        waiting = asyncio.create_task(worker.run(jobs.echo, "later", limits=QUICK))
        await until(started.exists)
        with pytest.raises(WorkerFailed, match="too many files and pages") as failed:
            await worker.run(jobs.echo, "one too many", limits=QUICK)
        assert failed.value.reason == "busy" and not waiting.done()
        running.cancel()
        assert await waiting == ["later"]
    finally:
        await worker.close()


async def test_an_idle_child_exits_and_the_next_job_starts_one() -> None:
    worker = Worker(memory_mb=512, idle_s=0.2)
    try:
        first = await worker.run(jobs.pid, limits=QUICK)
        await until(lambda: not alive(first) and worker.pid is None)
        assert await worker.run(jobs.pid, limits=QUICK) != first and worker.started == 2
    finally:
        await worker.close()


async def test_closing_ends_the_child(worker: Worker) -> None:
    first = await worker.run(jobs.pid, limits=QUICK)
    await worker.close()
    assert not alive(first) and worker.pid is None


PARENT = """
import asyncio, sys
from gateway.worker.parent import JobLimits, Worker
from tests import worker_jobs

async def main():
    worker = Worker(memory_mb=512)
    print(await worker.run(worker_jobs.pid, limits=JobLimits(30, 120)), flush=True)
    if sys.argv[1] == "busy":
        await worker.run(worker_jobs.touch_and_spin, sys.argv[2], limits=JobLimits(600, 600))
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.parametrize("state", ["idle", "busy"])
async def test_the_child_dies_with_its_parent(tmp_path: Path, state: str) -> None:
    """kill -9 of the daemon, whether its worker waits for a job or is deep in one."""
    started = tmp_path / "started"
    root = str(Path(__file__).resolve().parent.parent)
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PARENT,
        state,
        str(started),
        stdout=asyncio.subprocess.PIPE,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        assert parent.stdout is not None
        child = int(await asyncio.wait_for(parent.stdout.readline(), 60))
        if state == "busy":
            await until(started.exists)
        assert alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
    try:
        await until(lambda: not alive(child))
    finally:
        if alive(child):  # the test failed: leave no orphan spinning
            os.kill(child, signal.SIGKILL)


# ------------------------------------------------------------------------------------------ wire
def test_the_wire_refuses_what_is_not_a_frame() -> None:
    value = {"ok": [b"blob", "text", {"k": None}]}
    frame = encode(value)
    header, _ = split(frame[:12])
    assert decode(frame[12 : 12 + header], frame[12 + header :]) == value
    with pytest.raises(WireError, match="over the cap"):
        split(b"\xff\xff\xff\xff" + bytes(8))
    deep = b'{"v": ' + b'{"l": [' * 5000 + b"]}" * 5000 + b', "sizes": []}'
    for head, body in [
        (b"not json", b""),
        (b'{"v": 1, "sizes": [5]}', b"abc"),
        (b'{"v": {"b": 3}, "sizes": []}', b""),
        (b'{"v": {"x": 1}, "sizes": []}', b""),
        (b'{"v": {"l": 1, "m": 2}, "sizes": []}', b""),
        (deep, b""),
    ]:
        with pytest.raises(WireError):
            decode(head, body)


def test_a_dataclass_is_rebuilt_only_from_its_fields_of_their_types() -> None:
    fine = {"name": "a", "data": b"", "count": None}
    assert rebuild(jobs.Sized, fine) == jobs.Sized("a", b"", None)
    for bad in [
        {"name": "a", "data": b""},
        {**fine, "x": 1},
        {**fine, "data": "not bytes"},
        {**fine, "count": True},
        ["name", "data", "count"],
    ]:
        with pytest.raises(WireError):
            rebuild(jobs.Sized, bad)
