"""Reminders that fire: one scheduler per process, and the delivery chain of what fired.

    Scheduler (every process that holds sessions)   sleeps until the soonest reminder is due
      │   (at most `reminders.check_seconds`; woken at once by a change made in this process)
      ▼
    store.fire_reminder(...)   the claim: exactly one process in the fleet wins each occurrence,
      │                        which waits in the store's fired list until a delivery takes it
      ▼
    1. the device is in a conversation here      → spoken at its next pause
    2. ... on a sibling worker / fleet instance  → that worker is asked to say it (same as 1.)
    3. idle and reachable by push (MQTT)         → `notify` (vixio/app/notify.py) via `IdlePush`
    4. otherwise (a WebSocket device that hung up) → it stays in the store; the device's next
       session, on any worker, after a restart too, starts with it, marked late when it is

A process that dies between the claim and a delivery loses nothing: the occurrence is still in
the store for the next session. A delivery claims it just before speaking, so two deliveries
never both say it, and removes it only once its words went out (the downlink sent the reply
that says it to its end, `XiaozhiConnection.say_delivered`): a session that started closing
between the claim and the words puts it back and sends it down the chain again (seen under
load: a missed reminder claimed by a session that was hanging up, and lost). Operator messages (`vixio say DEVICE`, `/api/say` with a device)
are reminders of kind "message" due now, and go the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from loguru import logger

from vixio.app.notify import NotifyAudio
from vixio.config.reminders import RemindersConfig
from vixio.state.reminders import FiredReminder, zone_of
from vixio.state.store import Store, StoreError

if TYPE_CHECKING:
    from vixio.app.server import VixioServer
    from vixio.fleet.peers import Peers
    from vixio.transports.xiaozhi.session.connection import XiaozhiConnection

PATH = "/internal/reminders"
BATCH = 50
"""Due reminders claimed per look (more are taken at once by the next look)."""
LATE_AFTER = 90.0
"""Seconds past its time after which a reminder is said as missed."""
PAUSE_QUIET = 1.5
"""Seconds since the last reply audio or typed/wake-word text (`connection.last_activity`) that make
a pause; the microphone's VAD is not consulted."""
PAUSE_WAIT = 120.0
"""Longest wait for a pause; then it is said between two turns anyway."""
SAY_WAIT = 120.0
"""Longest wait for one occurrence's words to go out (behind a reply, paced at real time)."""
CLAIM_BATCH = 2
CLAIM_LEASE = 2 * SAY_WAIT + 60.0
"""Occurrences a delivery claims at once, and how long its claim holds: longer than it can take
to say them, so only a delivery that died leaves a claim to lapse (then the next one has them)."""

SESSION_READY_POLLS, SESSION_READY_POLL_S = 100, 0.05
"""How long a new session's first words wait for its connection to be ready (5 s)."""
ALERT_STATUS = {"en": "Reminder", "zh": "提醒"}
"""The title of the `alert` an idle MQTT device shows for a reminder."""

log = logger.bind(component="vixio.reminders")


class IdlePush(Protocol):
    """Reaches a device that is connected but idle (MQTT): True when `message` was delivered."""

    async def push_to_idle_device(self, device_id: str, message: dict[str, Any]) -> bool: ...


def spoken_text(fired: FiredReminder, language: str, now: float) -> str:
    """What is said for `fired`: on time, or as missed when it is `LATE_AFTER` past due."""
    text = fired.text.rstrip("。.!！ ")
    late = now - fired.due > LATE_AFTER
    moment = datetime.fromtimestamp(fired.due, zone_of(fired.zone))
    same_day = moment.date() == datetime.fromtimestamp(now, zone_of(fired.zone)).date()
    if language == "zh":
        when = f"{moment:%H:%M}" if same_day else f"{moment.month}月{moment.day}日{moment:%H:%M}"
        if fired.kind == "message":
            return f"{text}。" if not late else f"{when}有一条留言：{text}。"
        name = {"alarm": "闹钟", "timer": "计时", "reminder": "提醒"}.get(fired.kind, "提醒")
        if late:
            return f"你错过了{when}的{name}：{text}。"
        return f"计时结束：{text}。" if fired.kind == "timer" else f"{name}：{text}。"
    when = f"{moment:%H:%M}" if same_day else f"{moment:%a %d %b} at {moment:%H:%M}"
    if fired.kind == "message":
        return f"{text}." if not late else f"A message from {when}: {text}."
    if late:
        return f"You missed a{'n' if fired.kind == 'alarm' else ''} {fired.kind} at {when}: {text}."
    return {"alarm": f"Alarm: {text}.", "timer": f"Time's up: {text}."}.get(fired.kind, f"Reminder: {text}.")


class Reminders:
    """The scheduler and the delivery chain of one process (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        config: RemindersConfig,
        language: str,
        connections: Callable[[], dict[str, XiaozhiConnection]],
        notify: NotifyAudio | None,
    ) -> None:
        self.store = store
        self.config = config
        self.language = language
        self.connections = connections
        self.notify = notify
        self.idle_push: IdlePush | None = None
        """Idle devices reachable by push (the MQTT transport); None: only live sessions and the next one."""
        self.siblings: Peers | None = None
        """The other workers (set by vixio/serve/worker.py); None in one process."""
        self.worker = ""
        self.locate: Callable[[str], Awaitable[list[str] | None]] | None = None
        """Device id -> its holders, newest first, from the live-session directory."""
        self._closed = False
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.fired_here = 0
        """Occurrences this process claimed (a fleet's add up to each one once)."""

    # --- the scheduler ------------------------------------------------------------------------

    def changed(self) -> None:
        """A reminder was set or cancelled in this process: look again now."""
        self._wake.set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._run(), name="vixio-reminders")

    async def close(self) -> None:
        self._closed = True
        for task in [self._loop, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*[t for t in [self._loop, *self._tasks] if t is not None], return_exceptions=True)
        self._loop = None

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # before the look: a change made during it wakes the next sleep
            delay = self.config.check_seconds
            try:
                await self._fire_due()
                due = await self.store.next_reminder_due()
                if due is not None:
                    delay = min(delay, max(0.0, due - time.time()))
            except StoreError as exc:
                log.warning("reminders not checked (the state store): {}; again in {:g} s", exc, delay)
            except Exception:  # the scheduler must outlive one bad reminder
                log.exception("reminders: the check failed; again in {:g} s", delay)
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _fire_due(self) -> None:
        while True:
            now = time.time()
            due = await self.store.due_reminders(now, BATCH)
            claimed = 0
            for reminder in due:
                if await self.store.fire_reminder(reminder, reminder.following(now), self.config.keep_missed):
                    claimed += 1
                    self.fired_here += 1
                    log.bind(device=reminder.device_id).info(
                        "{} {} fired ({:.1f} s after its time): {!r}",
                        reminder.kind,
                        reminder.id,
                        now - reminder.due,
                        reminder.text[:60],
                    )
                    self._spawn(self.deliver(reminder.fired()))
            if len(due) < BATCH or not claimed:  # a full batch someone else claimed: look again later
                return

    # --- delivery -----------------------------------------------------------------------------

    async def deliver(self, fired: FiredReminder) -> str:
        """Take `fired` down the chain; how it went ("spoken", "relayed", "notify", "held", or
        "taken": another delivery had claimed it)."""
        device_id = fired.device_id
        if self._connection(device_id) is not None:
            await self.speak_pending(device_id)
            return "spoken"
        if self.siblings is not None and await self._relay(device_id):
            return "relayed"
        if self.idle_push is not None and self.notify is not None:
            # `alert` first: every 2.x firmware shows it and plays its vibration sound (application.cc,
            # "alert" needs status, message and emotion), and whether it was delivered tells whether
            # the device is idle on MQTT at all before a TTS render is spent; then `notify` speaks it
            # on firmware that plays notify audio (others ignore an unknown type with one log line).
            text = spoken_text(fired, self.language, time.time())
            alert = {
                "type": "alert",
                "status": ALERT_STATUS.get(self.language, ALERT_STATUS["en"]),
                "message": text[:200],
                "emotion": "neutral",
            }
            now = time.time()
            if not await self.store.claim_fired(device_id, now, now + CLAIM_LEASE, fired.occurrence):
                return "taken"  # another delivery has it (or had it)
            if await self.idle_push.push_to_idle_device(device_id, alert):
                message = await self.notify.render(text)
                if message is not None:
                    await self.idle_push.push_to_idle_device(device_id, message)
                await self._settle(device_id, [fired.occurrence], delivered=True)
                log.bind(device=device_id).info("{} {} sent as alert and notify", fired.kind, fired.reminder_id)
                return "notify"
            await self._settle(device_id, [fired.occurrence], delivered=False)
        log.bind(device=device_id).info(
            "{} {}: the device is away; kept for its next session", fired.kind, fired.reminder_id
        )
        if self._connection(device_id) is not None:  # it came back meanwhile
            await self.speak_pending(device_id)
        return "held"

    def device_session(self, device_id: str, session_id: str) -> None:
        """A device's session started here: what fired while it was away is its first words."""
        self._spawn(self._first_words(device_id))

    async def _first_words(self, device_id: str) -> None:
        # The transport tells of a session as it starts, before its connection has a session to say
        # things in: wait for it (bounded), or the occurrences would stay in the store unsaid until
        # the device's next session (seen under load: the reminder was missing from the first words).
        for _ in range(SESSION_READY_POLLS):
            if self._connection(device_id) is not None:
                break
            await asyncio.sleep(SESSION_READY_POLL_S)
        await self.speak_pending(device_id, wait_for_pause=False)

    async def speak_pending(self, device_id: str, *, wait_for_pause: bool = True) -> int:
        """Say the device's fired occurrences in its live session here (after a pause); how many
        were delivered. Each is claimed before it is said and removed only once its words went
        out; one the session did not deliver (it ended first) goes back to the store and down
        the chain again (the device's next session, wherever it is)."""
        connection = self._connection(device_id)
        if connection is None:
            return 0
        if wait_for_pause:
            await _pause(connection)
        delivered = 0
        while self._connection(device_id) is connection:  # else it hung up meanwhile: the store keeps them
            now = time.time()
            try:
                fired = await self.store.claim_fired(device_id, now, now + CLAIM_LEASE, limit=CLAIM_BATCH)
            except StoreError as exc:
                log.warning("reminders of {} not read: {}", device_id, exc)
                return delivered
            said = 0
            try:
                for occurrence in fired:
                    late = " as missed" if now - occurrence.due > LATE_AFTER else ""
                    if not await connection.say_delivered(spoken_text(occurrence, self.language, now), SAY_WAIT):
                        break
                    await self._settle(device_id, [occurrence.occurrence], delivered=True)
                    said += 1
                    log.bind(device=device_id).info("{} {} spoken{}", occurrence.kind, occurrence.reminder_id, late)
            finally:  # not delivered (the session ended first, or this task was cancelled): give them back
                if said < len(fired):
                    await asyncio.shield(self._give_back(device_id, connection, fired[said:]))
            delivered += said
            if said < len(fired):
                return delivered
            if len(fired) < CLAIM_BATCH:
                break
        return delivered

    async def _give_back(self, device_id: str, connection: XiaozhiConnection, fired: list[FiredReminder]) -> None:
        await self._settle(device_id, [f.occurrence for f in fired], delivered=False)
        log.bind(device=device_id).info(
            "{} occurrence(s) not delivered (the session ended first): back in the store", len(fired)
        )
        if not self._closed and self._connection(device_id) is not connection:
            self._spawn(self._redeliver(fired))

    async def _settle(self, device_id: str, occurrences: list[str], *, delivered: bool) -> None:
        try:
            await self.store.settle_fired(device_id, occurrences, delivered)
        except StoreError as exc:  # the claim lapses after CLAIM_LEASE: then the next delivery has them
            log.warning("reminders of {} not settled: {}", device_id, exc)

    async def _redeliver(self, fired: list[FiredReminder]) -> None:
        """What a closing session did not deliver, down the chain again (the device may be back)."""
        for occurrence in fired:
            await self.deliver(occurrence)

    def _connection(self, device_id: str) -> XiaozhiConnection | None:
        for connection in list(self.connections().values()):
            # A closing session (or a stopping server) is not a conversation to say things in.
            session = connection.session
            if (
                connection.device_id == device_id
                and session is not None
                and not session.closed
                and not connection.stopping
            ):
                return connection
        return None

    async def _relay(self, device_id: str) -> bool:
        assert self.siblings is not None
        holders = [] if self.locate is None else await self.locate(device_id) or []
        for holder in holders:
            if holder != self.worker:
                reply = await self.siblings.request(
                    holder, "POST", PATH, json={"call": "deliver", "device_id": device_id}
                )
                if reply.ok:
                    return True
        return False

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /internal/reminders` from a sibling or the supervisor: `deliver` (say what fired
        for a device whose session is here) or `wake` (a reminder changed elsewhere)."""
        try:
            body = await request.json()
            call = body["call"]
            if call == "wake":
                self.changed()
                return web.json_response({"result": True})
            if call == "deliver":
                device_id = str(body["device_id"])
                if self._connection(device_id) is None:
                    return web.json_response({"error": "not here"}, status=404)
                self._spawn(self.speak_pending(device_id))
                return web.json_response({"result": True})
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad request: {exc}"}, status=400)
        return web.json_response({"error": "call must be deliver or wake"}, status=400)

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # one delivery that fails must not stop the others
                log.exception("delivering a reminder failed (it stays in the store for the next session)")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-reminder-delivery")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _pause(connection: XiaozhiConnection) -> None:
    """Until the conversation pauses: no reply being sent or made for `PAUSE_QUIET` seconds
    (bounded by `PAUSE_WAIT`, so a conversation that never pauses still hears it)."""
    deadline = time.monotonic() + PAUSE_WAIT
    while time.monotonic() < deadline and connection.session is not None:
        busy = connection.speaking or connection.session.pipeline.turn_in_progress
        if not busy and time.monotonic() - connection.last_activity >= PAUSE_QUIET:
            return
        await asyncio.sleep(0.2)


def attach_reminders(server: VixioServer) -> Reminders:
    """The reminders of `server`: its scheduler (started with it), the tools (when `tools.builtin`
    has `reminders`), first words of a device's next session, the notify route and the console's wake."""
    from vixio.app.notify import PATH as NOTIFY_PATH
    from vixio.app.notify import url_base
    from vixio.state.reminder_tools import reminder_tools

    config = server.config
    settings = config.reminders
    notify = NotifyAudio(
        server.store,
        settings.notify,
        lambda: server.voice.tts,
        lambda: url_base(
            settings.notify,
            config.xiaozhi.public_url,
            server.transport.http_port or config.xiaozhi.http.port,
            config.xiaozhi.http.host,
        ),
    )
    reminders = Reminders(server.store, settings, config.language, lambda: server.transport.connections, notify)
    if "reminders" in config.tools.builtin and config.agent is not None:
        server.voice.reminder_tools = reminder_tools(
            server.store, settings, config.agent.timezone or "", reminders.changed
        )
    earlier = server.transport.on_device_session

    def device_session(device_id: str, session_id: str) -> None:
        if earlier is not None:
            earlier(device_id, session_id)
        reminders.device_session(device_id, session_id)

    server.transport.on_device_session = device_session

    async def wake() -> None:
        reminders.changed()

    server.console.reminders.wake = wake
    server.ota.add_route("GET", NOTIFY_PATH, notify.handle)  # served where the HTTP port is (one process)
    return reminders
