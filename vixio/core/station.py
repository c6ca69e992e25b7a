"""The Station: one step of a pipeline.

A station declares the chunk classes it `handles`; the pipeline calls `process(chunk)` for those
and forwards every other chunk unchanged, in order. `process` is an async generator: it yields
zero or more chunks per input. A chunk yielded without a session or turn id is stamped with the
input's, so most stations never touch ids.

    class Shout(Station):
        handles = (TextChunk,)

        async def process(self, chunk):
            yield TextChunk(text=chunk.text.upper(), role=chunk.role)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, ClassVar

from loguru import logger

from vixio.core.chunk import BaseChunk, Chunk

if TYPE_CHECKING:
    from loguru import Logger

    from vixio.core.pipeline import Pipeline
    from vixio.core.session_state import SessionState


class Station(ABC):
    """Base class of every pipeline step."""

    handles: ClassVar[tuple[type[BaseChunk], ...]] = ()
    """Chunk classes passed to `process`; every other chunk passes through untouched."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__
        self.logger: Logger = logger.bind(station=self.name)
        self._pipeline: Pipeline | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def attach(self, pipeline: Pipeline) -> None:
        """Called by the pipeline before `start`; binds the station to its session."""
        self._pipeline = pipeline
        self.logger = pipeline.logger.bind(station=self.name)

    async def start(self) -> None:
        """Acquire per-session resources (models are loaded per process, not here)."""

    async def stop(self) -> None:
        """Release what `start` acquired; called once when the pipeline stops."""

    async def on_interrupt(self) -> None:
        """The current turn was cancelled: drop buffered state (text, audio, pending work).

        Runs before the station sees any chunk of the new turn.
        """

    # --- work ---------------------------------------------------------------------------------

    @abstractmethod
    def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        """Handle one chunk of a class in `handles`; yield what goes downstream."""

    inline: ClassVar[bool] = False
    """True when `process` never awaits (it only transforms what it is given, like the text and
    sentence aggregators): the pipeline runs it in the task of the station before it, which
    saves a task hand-over (one event-loop iteration, ~10-15 ms on a busy server) per chunk.
    Ignored for the first station. It may still yield an InterruptChunk; the station before it
    then keeps running too, as the interrupt's origin does."""

    merges: ClassVar[bool] = False
    """True when `merge` may join queued chunks: a station that awaits a round trip per chunk
    (the VAD's batched scoring) then catches up in one step after falling behind, instead of
    staying one round trip per chunk behind real time."""

    def merge(self, chunk: Chunk, following: Chunk) -> Chunk | None:
        """`chunk` and `following` (queued right behind it) as one chunk to process at once, or
        None to process them one by one. Called only when `merges` is true; the result must
        yield what processing the two in turn would."""
        return None

    # --- helpers for subclasses ---------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._pipeline.session_id if self._pipeline else ""

    @property
    def session_state(self) -> SessionState:
        """The conversation state of the session this station serves."""
        if self._pipeline is None:
            raise RuntimeError(f"{self.name} is not attached to a pipeline")
        return self._pipeline.state

    @property
    def current_turn_id(self) -> int:
        """The turn new input belongs to; stamp chunks that start a new turn with it."""
        return self._pipeline.turn_id if self._pipeline else 0

    def begin_turn(self) -> int:
        """Start a new turn without cancelling anything; returns its id."""
        if self._pipeline is None:
            raise RuntimeError(f"{self.name} is not attached to a pipeline")
        return self._pipeline.begin_turn()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
