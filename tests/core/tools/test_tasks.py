from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from loguru import logger

from vixio.core.tools.context import AsyncTaskRecord, ToolCallContext
from vixio.core.tools.executor import ToolExecutor
from vixio.core.tools.local import func_to_tool_definition
from vixio.core.tools.tasks import STOPPED_BY_RESTART, AsyncTaskQueue, SessionTaskRunner, task_status_tool
from vixio.core.tools.toolset import ToolSet
from vixio.core.tools.types import ToolCallRequest, ToolDefinition

pytestmark = pytest.mark.unit

WAIT = 1.0
"""Upper bound for an event the test expects; a correct run sets it within milliseconds."""


class Gate:
    """A slow tool the test opens: records each start, waits for `release`, then answers or raises."""

    def __init__(self, name: str = "slow_search", *, answer: str = "found it", error: Exception | None = None) -> None:
        self.name = name
        self.answer = answer
        self.error = error
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[dict[str, Any]] = []
        self.cancelled = False

    async def run(self, arguments: dict[str, Any]) -> str:
        self.calls.append(arguments)
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.answer

    @property
    def tool(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, description="Slow.", executor=self.run, is_async=True)


class Reports:
    """An on_complete callback that records the records it got."""

    def __init__(self) -> None:
        self.records: list[AsyncTaskRecord] = []
        self.statuses: list[str] = []
        self.arrived = asyncio.Event()

    async def __call__(self, record: AsyncTaskRecord) -> None:
        self.records.append(record)
        self.statuses.append(record.status)
        self.arrived.set()


@pytest.fixture
async def queue() -> AsyncIterator[AsyncTaskQueue]:
    queue = AsyncTaskQueue(max_concurrent=2)
    yield queue
    await queue.shutdown()


def request(call_id: str = "call_1", **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(call_id=call_id, tool_name="slow_search", arguments=arguments or {"query": "x"})


async def settle() -> None:
    """Let every ready task take its next steps (no wall-clock wait)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_submit_answers_pending_at_once_then_runs_to_completion(queue: AsyncTaskQueue, no_leaked_tasks) -> None:
    context, gate, reports = ToolCallContext(), Gate(), Reports()
    runner = SessionTaskRunner(queue, context, session_id="s1", on_complete=reports)

    result = runner.submit(gate.tool, request(query="weather"))

    assert (result.call_id, result.success, result.status) == ("call_1", True, "pending")
    handle = json.loads(result.result or "")
    assert handle == {
        "type": "async_task",
        "task_id": handle["task_id"],
        "status": "pending",
        "message": "slow_search is running in the background; its result will be reported when it finishes",
    }
    assert "," in result.result and ", " not in result.result  # compact JSON
    record = context.tasks[handle["task_id"]]
    assert context.task_for_call("call_1") is record
    assert (record.status, record.tool_name, record.arguments, record.session_id) == (
        "pending",
        "slow_search",
        {"query": "weather"},
        "s1",
    )
    assert not gate.started.is_set()

    await asyncio.wait_for(gate.started.wait(), WAIT)
    assert record.status == "running" and record.started_at is not None and record.finished_at is None
    assert gate.calls == [{"query": "weather"}]

    gate.release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    await settle()
    assert reports.records == [record] and reports.statuses == ["completed"]
    assert (record.status, record.result, record.error) == ("completed", "found it", None)
    assert record.created_at <= record.started_at <= record.finished_at
    assert len(queue) == 0


async def test_completed_task_updates_the_calls_result_in_the_context(queue: AsyncTaskQueue) -> None:
    context, gate, reports = ToolCallContext(), Gate(answer="sunny"), Reports()
    runner = SessionTaskRunner(queue, context, on_complete=reports)
    req = request("call_7")
    context.record_call(req)
    context.record_result(runner.submit(gate.tool, req))
    assert context.get("call_7").result.status == "pending"  # type: ignore[union-attr]

    gate.release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    final = context.get("call_7").result  # type: ignore[union-attr]
    assert (final.status, final.success, final.text, final.call_id) == ("completed", True, "sunny", "call_7")


async def test_failing_tool_is_failed_with_its_error(queue: AsyncTaskQueue) -> None:
    context, reports = ToolCallContext(), Reports()
    gate = Gate(error=ConnectionError("search backend down"))
    runner = SessionTaskRunner(queue, context, on_complete=reports)
    runner.submit(gate.tool, request())
    gate.release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)

    record = reports.records[0]
    assert record.status == "failed" and record.result is None
    assert record.error == "slow_search failed: ConnectionError: search backend down"
    assert record.to_result().text == "Error: slow_search failed: ConnectionError: search backend down"


async def test_tool_answering_with_a_failure_is_failed(queue: AsyncTaskQueue) -> None:
    from vixio.core.tools.types import ToolCallResult

    class Device:
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
            return ToolCallResult.fail(f"{name}: no such speaker")

    reports = Reports()
    runner = SessionTaskRunner(queue, ToolCallContext(), on_complete=reports)
    tool = ToolDefinition(name="play", description="", source="device", client=Device(), is_async=True)
    runner.submit(tool, request())
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    assert (reports.records[0].status, reports.records[0].error) == ("failed", "play: no such speaker")


async def test_timeout_fails_the_task_and_stops_the_tool(queue: AsyncTaskQueue) -> None:
    context, gate, reports = ToolCallContext(), Gate(), Reports()
    runner = SessionTaskRunner(queue, context, on_complete=reports, timeout=0.05)
    runner.submit(gate.tool, request())
    await asyncio.wait_for(reports.arrived.wait(), WAIT)

    record = reports.records[0]
    assert record.status == "failed"
    assert record.error == "slow_search did not finish within 0.05 s"
    assert gate.cancelled


async def test_queue_timeout_is_the_default(no_leaked_tasks) -> None:
    queue = AsyncTaskQueue(timeout=0.05)
    gate, reports = Gate(), Reports()
    try:
        SessionTaskRunner(queue, ToolCallContext(), on_complete=reports).submit(gate.tool, request())
        await asyncio.wait_for(reports.arrived.wait(), WAIT)
    finally:
        await queue.shutdown()
    assert reports.records[0].error == "slow_search did not finish within 0.05 s"


async def test_concurrency_limit_keeps_the_extra_task_pending(queue: AsyncTaskQueue) -> None:
    context, reports = ToolCallContext(), Reports()
    gates = [Gate(answer=f"answer {n}") for n in range(3)]
    # Two sessions share the process queue (limit 2): the limit is the queue's, not a session's.
    first = SessionTaskRunner(queue, context, on_complete=reports)
    second = SessionTaskRunner(queue, ToolCallContext(), on_complete=reports)
    first.submit(gates[0].tool, request("a"))
    first.submit(gates[1].tool, request("b"))
    second.submit(gates[2].tool, request("c"))

    await asyncio.wait_for(asyncio.gather(gates[0].started.wait(), gates[1].started.wait()), WAIT)
    await settle()
    assert not gates[2].started.is_set()
    third = second.get("c")
    assert third is not None and third.status == "pending" and third.started_at is None
    assert (queue.count("running"), queue.count("pending")) == (2, 1)

    gates[1].release.set()
    await asyncio.wait_for(gates[2].started.wait(), WAIT)
    assert third.status == "running"
    assert first.get("a").status == "running"  # type: ignore[union-attr]

    gates[0].release.set()
    gates[2].release.set()
    await asyncio.wait_for(_until(lambda: len(reports.records) == 3), WAIT)
    assert sorted(r.result or "" for r in reports.records) == ["answer 0", "answer 1", "answer 2"]
    assert reports.records[0].call_id == "b"


async def test_cancel_all_cancels_running_and_pending_tasks_and_reports_none(no_leaked_tasks) -> None:
    queue = AsyncTaskQueue(max_concurrent=1)
    context, reports = ToolCallContext(), Reports()
    runner = SessionTaskRunner(queue, context, session_id="s9", on_complete=reports)
    running, waiting = Gate(), Gate()
    runner.submit(running.tool, request("a"))
    runner.submit(waiting.tool, request("b"))
    await asyncio.wait_for(running.started.wait(), WAIT)
    assert runner.get("b").status == "pending"  # type: ignore[union-attr]

    await runner.cancel_all()

    assert [r.status for r in runner.tasks()] == ["cancelled", "cancelled"]
    assert all(r.finished_at is not None for r in runner.tasks())
    assert running.cancelled and not waiting.started.is_set()
    assert reports.records == [] and len(queue) == 0
    refused = runner.submit(Gate().tool, request("c"))
    assert not refused.success and "session is ending" in (refused.error or "")
    await queue.shutdown()


async def test_cancel_all_leaves_other_sessions_tasks_running(queue: AsyncTaskQueue) -> None:
    mine, theirs, reports = Gate(), Gate(), Reports()
    ending = SessionTaskRunner(queue, ToolCallContext())
    staying = SessionTaskRunner(queue, ToolCallContext(), on_complete=reports)
    ending.submit(mine.tool, request())
    staying.submit(theirs.tool, request())
    await asyncio.wait_for(asyncio.gather(mine.started.wait(), theirs.started.wait()), WAIT)

    await ending.cancel_all()
    assert mine.cancelled and not theirs.cancelled
    theirs.release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    assert reports.statuses == ["completed"]


async def test_result_arriving_after_the_session_closed_is_not_reported(queue: AsyncTaskQueue) -> None:
    # A tool that ignores cancellation and answers anyway: its answer must not reach a closed session.
    reports = Reports()
    finished = asyncio.Event()

    async def stubborn(arguments: dict[str, Any]) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass
        finished.set()
        return "late"

    context = ToolCallContext()
    runner = SessionTaskRunner(queue, context, on_complete=reports)
    runner.submit(ToolDefinition(name="stubborn", description="", executor=stubborn, is_async=True), request())
    await settle()
    await runner.cancel_all()
    assert finished.is_set()
    assert reports.records == []
    assert context.task_for_call("call_1").status == "completed"  # type: ignore[union-attr]


async def test_on_complete_errors_are_logged_with_the_session(queue: AsyncTaskQueue) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(f"{m.record['extra'].get('session')} {m}"), level="ERROR")
    called = asyncio.Event()

    async def broken(record: AsyncTaskRecord) -> None:
        called.set()
        raise RuntimeError("conversation is gone")

    gate = Gate()
    try:
        runner = SessionTaskRunner(queue, ToolCallContext(), session_id="sess-4", on_complete=broken)
        runner.submit(gate.tool, request())
        gate.release.set()
        await asyncio.wait_for(called.wait(), WAIT)
        await asyncio.wait_for(_until(lambda: len(queue) == 0), WAIT)
    finally:
        logger.remove(sink)
    assert any(
        line.startswith("sess-4") and "conversation is gone" in line and "slow_search" in line for line in lines
    ), lines


async def test_task_status_tool_reports_one_task_and_lists_them(queue: AsyncTaskQueue) -> None:
    context, reports = ToolCallContext(), Reports()
    runner = SessionTaskRunner(queue, context, on_complete=reports)
    status = task_status_tool(runner)
    assert status.name == "get_task_status" and not status.is_async
    assert status.parameters["properties"]["task_id"]["type"] == "string"
    assert "task_id" not in status.parameters.get("required", [])

    empty = await status.invoke({})
    assert json.loads(empty.text) == {"tasks": []}

    done, slow = Gate(answer="42 results"), Gate(name="render")
    first = json.loads(runner.submit(done.tool, request("call_1")).result or "")["task_id"]
    second = json.loads(runner.submit(slow.tool, request("call_2")).result or "")["task_id"]
    done.release.set()
    await asyncio.wait_for(asyncio.gather(reports.arrived.wait(), slow.started.wait()), WAIT)

    one = await status.invoke({"task_id": first})
    assert one.success and ", " not in one.text
    data = json.loads(one.text)
    assert (data["task_id"], data["call_id"], data["tool"], data["status"], data["result"]) == (
        first,
        "call_1",
        "slow_search",
        "completed",
        "42 results",
    )
    assert "error" not in data

    by_call = json.loads((await status.invoke({"task_id": "call_2"})).text)
    assert (by_call["task_id"], by_call["status"]) == (second, "running") and "result" not in by_call

    listed = json.loads((await status.invoke({})).text)["tasks"]
    assert [(t["task_id"], t["status"]) for t in listed] == [(first, "completed"), (second, "running")]

    unknown = json.loads((await status.invoke({"task_id": "task_999"})).text)
    assert unknown["error"] == f"there is no task task_999 in this conversation; its tasks are: {first}, {second}"


async def test_executor_hands_async_tools_to_the_runner_and_answers_at_once(
    queue: AsyncTaskQueue, no_leaked_tasks
) -> None:
    release, started = asyncio.Event(), asyncio.Event()

    async def slow_search(query: str, limit: int = 3) -> dict[str, Any]:
        """Search the web (slow)."""
        started.set()
        await release.wait()
        return {"query": query, "hits": limit}

    toolset = ToolSet(session_id="s2")
    context, reports = ToolCallContext(), Reports()
    runner = SessionTaskRunner(queue, context, session_id="s2", on_complete=reports)
    toolset.set_tools("local", [func_to_tool_definition(slow_search, is_async=True), task_status_tool(runner)])
    executor = ToolExecutor(toolset, context, async_runner=runner, session_id="s2")

    result = await asyncio.wait_for(
        executor.execute(
            ToolCallRequest(call_id="call_3", tool_name="slow_search", arguments={"query": "cats", "limit": "5"})
        ),
        WAIT,
    )

    assert (result.call_id, result.status, result.success) == ("call_3", "pending", True)
    task_id = json.loads(result.result or "")["task_id"]
    assert not release.is_set() and context.get("call_3").result is result  # type: ignore[union-attr]
    record = context.task(task_id)
    assert record is not None and record.arguments == {"query": "cats", "limit": 5}  # coerced by the executor

    await asyncio.wait_for(started.wait(), WAIT)
    polled = await executor.execute(
        ToolCallRequest(call_id="call_4", tool_name="get_task_status", arguments={"task_id": task_id})
    )
    assert json.loads(polled.text)["status"] == "running"

    release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    assert json.loads(reports.records[0].result or "") == {"query": "cats", "hits": 5}
    final = context.get("call_3").result  # type: ignore[union-attr]
    assert final is not None and final.status == "completed"
    await executor.close()


async def test_queue_shutdown_cancels_every_session_and_refuses_new_tasks(no_leaked_tasks) -> None:
    queue = AsyncTaskQueue(max_concurrent=1)
    gates = [Gate(), Gate()]
    runners = [SessionTaskRunner(queue, ToolCallContext(), session_id=f"s{n}") for n in range(2)]
    for gate, runner in zip(gates, runners, strict=True):
        runner.submit(gate.tool, request())
    await asyncio.wait_for(gates[0].started.wait(), WAIT)

    await queue.shutdown()

    # Running or waiting, each is reported as stopped by the restart, not dropped in silence.
    assert [runner.tasks()[0].status for runner in runners] == ["failed", "failed"]
    assert all("server restarted" in (runner.tasks()[0].error or "") for runner in runners)
    assert len(queue) == 0 and queue.closed
    refused = runners[0].submit(Gate().tool, request("again"))
    assert refused.status == "failed"
    with pytest.raises(RuntimeError, match="shut down"):
        queue.submit(AsyncTaskRecord("t", "c", "x"), Gate().tool)


async def test_a_task_running_at_a_restart_reaches_the_reporter_of_its_released_session(no_leaked_tasks) -> None:
    queue, gate, reports = AsyncTaskQueue(), Gate(), Reports()
    runner = SessionTaskRunner(queue, ToolCallContext(), session_id="s1")
    runner.submit(gate.tool, request())
    await asyncio.wait_for(gate.started.wait(), WAIT)
    await runner.release(reports)  # the session ended; its device may come back
    await queue.shutdown()  # the server stops before the tool answered
    assert gate.cancelled and reports.statuses == ["failed"]
    assert reports.records[0].error == STOPPED_BY_RESTART.format(tool="slow_search")


async def test_task_cancelled_before_its_first_step_is_cancelled(no_leaked_tasks) -> None:
    queue = AsyncTaskQueue()
    gate = Gate()
    runner = SessionTaskRunner(queue, ToolCallContext())
    runner.submit(gate.tool, request())
    await queue.shutdown()  # no await between: the task never ran
    assert runner.tasks()[0].status == "cancelled" and not gate.started.is_set()


async def test_queue_cancel_stops_one_task(queue: AsyncTaskQueue) -> None:
    reports, gate, other = Reports(), Gate(), Gate()
    runner = SessionTaskRunner(queue, ToolCallContext(), on_complete=reports)
    task_id = json.loads(runner.submit(gate.tool, request("a")).result or "")["task_id"]
    runner.submit(other.tool, request("b"))
    await asyncio.wait_for(asyncio.gather(gate.started.wait(), other.started.wait()), WAIT)

    assert queue.get(task_id) is runner.get(task_id)
    assert queue.cancel(task_id) and not queue.cancel("task_unknown")
    await asyncio.wait_for(_until(lambda: queue.get(task_id) is None), WAIT)
    assert gate.cancelled and runner.get(task_id).status == "cancelled"  # type: ignore[union-attr]
    other.release.set()
    await asyncio.wait_for(reports.arrived.wait(), WAIT)
    assert [r.call_id for r in reports.records] == ["b"]


def test_context_forgets_finished_tasks_before_unfinished_ones() -> None:
    from vixio.core.tools.context import MAX_RECORDS

    context = ToolCallContext()
    still_running = AsyncTaskRecord("task_0", "call_0", "slow")
    context.record_task(still_running)
    for n in range(1, MAX_RECORDS + 2):
        record = AsyncTaskRecord(f"task_{n}", f"call_{n}", "quick")
        record.finish("completed", result="ok")
        context.record_task(record)
    assert len(context.tasks) == MAX_RECORDS
    assert context.task("task_0") is still_running and context.task_for_call("call_0") is still_running
    assert context.task("task_1") is None and context.task("task_2") is None and context.task("task_3") is not None
    assert context.unfinished_tasks == [still_running]


def test_bad_queue_settings_name_the_setting() -> None:
    with pytest.raises(ValueError, match="max_concurrent must be at least 1, got 0"):
        AsyncTaskQueue(max_concurrent=0)
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds, got -1"):
        AsyncTaskQueue(timeout=-1)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0)
