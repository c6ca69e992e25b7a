"""Microphone frames that queued behind each other, joined for one scoring round trip (VADStation.merge).

A station awaiting one scoring round trip per 60 ms frame falls behind real time for good once a
round trip takes longer (a loaded server); merged, a backlog is scored at once and each frame is
then handled as it came.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vixio.core.chunk import AudioChunk, Chunk

MAX_MERGED_SECONDS = 1.0
"""Most queued microphone audio scored in one round trip when the station catches up."""


@dataclass(kw_only=True, slots=True)
class QueuedFrames(AudioChunk):
    """Microphone frames that queued behind each other (see `VADStation.merge`): `pcm` is all of
    them, `parts` each frame as it came, handled one by one after one scoring round trip."""

    parts: list[bytes] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """Each part's `created_at`: when its frame reached the server."""


def merge_frames(chunk: Chunk, following: Chunk) -> QueuedFrames | None:
    """`chunk` and the frame queued right behind it as one, up to `MAX_MERGED_SECONDS`; None
    when they are not two user frames of one turn and one format."""
    if not (
        isinstance(chunk, AudioChunk)
        and isinstance(following, AudioChunk)
        and chunk.role == following.role == "user"
        and chunk.turn_id == following.turn_id
        and (chunk.sample_rate, chunk.channels) == (following.sample_rate, following.channels)
        and chunk.duration < MAX_MERGED_SECONDS
    ):
        return None
    parts = [*(chunk.parts if isinstance(chunk, QueuedFrames) else [chunk.pcm]), following.pcm]
    arrivals = [*(chunk.arrivals if isinstance(chunk, QueuedFrames) else [chunk.created_at]), following.created_at]
    return QueuedFrames(
        pcm=b"".join(parts),
        parts=parts,
        arrivals=arrivals,
        sample_rate=chunk.sample_rate,
        channels=chunk.channels,
        session_id=chunk.session_id,
        turn_id=chunk.turn_id,
        created_at=chunk.created_at,
    )
