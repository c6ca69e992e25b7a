from __future__ import annotations

import asyncio

import pytest

from vixio.core.chunk import (
    AudioChunk,
    ErrorChunk,
    InterruptChunk,
    StreamCompleteChunk,
    TextChunk,
    TextDeltaChunk,
    TurnEndChunk,
    TurnStartChunk,
    VADEndChunk,
    VADStartChunk,
)
from vixio.core.pipeline import Pipeline
from vixio.stations import AgentStation, ASRStation, TurnDetectorStation, VADStation
from vixio.testing.harness import run_station

from .fakes import LoudnessVAD, ScriptedAgent, ScriptedASR, loud, quiet

pytestmark = pytest.mark.unit


def frames(pcm: bytes, ms: int = 60) -> list[AudioChunk]:
    step = 16 * ms * 2
    return [AudioChunk(pcm=pcm[i : i + step], sample_rate=16000) for i in range(0, len(pcm), step)]


async def test_vad_passes_only_speech_with_pre_roll_between_start_and_end() -> None:
    audio = quiet(1.0) + loud(1.0) + quiet(1.0)
    out = await run_station(
        VADStation(LoudnessVAD(), min_speech_ms=250, min_silence_ms=500, speech_pad_ms=100), frames(audio)
    )
    kinds = [c.kind for c in out]
    assert kinds[0] == "vad_start" and "vad_end" in kinds
    speech = [c for c in out[: kinds.index("vad_end")] if isinstance(c, AudioChunk)]
    seconds = sum(c.duration for c in speech)
    # the whole 1 s of speech, its 100 ms pads, and the silence before the end was decided
    assert 1.1 <= seconds <= 1.1 + 0.5 + 0.07
    assert not any(isinstance(c, AudioChunk) for c in out[kinds.index("vad_end") :])  # silence consumed


async def test_vad_barges_in_when_the_assistant_is_speaking() -> None:
    pipeline = Pipeline([VADStation(LoudnessVAD())], session_id="s")
    async with pipeline:
        pipeline.state.bot_speaking = True
        turn = pipeline.turn_id
        for chunk in frames(quiet(0.3) + loud(0.6)):
            await pipeline.push(chunk)
        await pipeline.join()
        out = pipeline.drain_output()
    assert isinstance(out[0], InterruptChunk) and out[0].reason == "barge_in"
    assert pipeline.state.interruptions == {"real": 1, "false": 0}
    assert isinstance(out[1], VADStartChunk) and out[1].turn_id > turn
    # the speech that caused the barge-in survived the interrupt (user audio is never stale)
    assert sum(c.duration for c in out if isinstance(c, AudioChunk)) >= 0.3


async def test_turn_detector_vad_turns_short_blips_and_push_to_talk() -> None:
    speech = AudioChunk(pcm=loud(0.5), sample_rate=16000)
    blip = AudioChunk(pcm=loud(0.1), sample_rate=16000)
    out = await run_station(
        TurnDetectorStation(min_speech_ms=300),
        [
            VADStartChunk(),
            speech,
            VADEndChunk(),  # a turn
            VADStartChunk(),
            blip,
            VADEndChunk(),  # too short: no turn end
        ],
    )
    assert [c.kind for c in out] == [
        "vad_start",
        "turn_start",
        "audio",
        "vad_end",
        "turn_end",
        "vad_start",
        "turn_start",
        "audio",
        "vad_end",
    ]
    out = await run_station(
        TurnDetectorStation(),
        [
            TurnStartChunk(source="push_to_talk"),
            VADStartChunk(),
            speech,
            VADEndChunk(),
            speech,
            TurnEndChunk(source="push_to_talk"),
            speech,  # after release: dropped
        ],
    )
    assert [c.kind for c in out] == ["turn_start", "vad_start", "audio", "vad_end", "audio", "turn_end"]


async def test_asr_transcribes_the_turn_and_consumes_its_audio() -> None:
    asr = ScriptedASR("turn the volume up", "")
    out = await run_station(
        ASRStation(asr),
        [
            TurnStartChunk(),
            *frames(loud(0.6)),
            TurnEndChunk(),
            TurnStartChunk(),
            *frames(loud(0.3)),
            TurnEndChunk(),  # nothing recognised
        ],
    )
    # The recogniser hears the speech between 0.2 s of silence either side (vixio.core.utterance),
    # a tone's first sample (zero) being silence.
    assert asr.calls == [((0.6 + 0.4) * 16000 * 2 - 2, 16000), ((0.3 + 0.4) * 16000 * 2 - 2, 16000)]
    assert [c.kind for c in out if c.kind != "metrics"] == ["turn_start", "text", "turn_end", "turn_start", "turn_end"]
    text = next(c for c in out if isinstance(c, TextChunk))
    assert (text.text, text.role) == ("turn the volume up", "user")


async def test_asr_failure_becomes_an_error_event() -> None:
    out = await run_station(ASRStation(ScriptedASR(fail=True)), [TurnStartChunk(), *frames(loud(0.3)), TurnEndChunk()])
    error = next(c for c in out if isinstance(c, ErrorChunk))
    assert error.source == "ASRStation" and "unreachable" in error.message


async def test_agent_streams_the_reply_and_records_history() -> None:
    agent = ScriptedAgent("It is noon.")
    station = AgentStation(agent, system_prompt="be brief")
    out = await run_station(station, [TextChunk(text="what time is it", role="user")])
    assert agent.asked == ["what time is it"] and agent.system_prompt == "be brief"
    assert out[0].kind == "text" and out[0].role == "user"  # forwarded for `stt`
    assert "".join(c.text for c in out if isinstance(c, TextDeltaChunk)).strip() == "It is noon."
    assert isinstance(out[-1], StreamCompleteChunk)
    assert [(m.role, m.content) for m in station.session_state.history] == [
        ("user", "what time is it"),
        ("assistant", "It is noon. "),
    ]


async def test_agent_failure_is_an_error_event_and_the_next_turn_works() -> None:
    agent = ScriptedAgent(RuntimeError("model down"), "Back again.")
    out = await run_station(AgentStation(agent), [TextChunk(text="a", role="user"), TextChunk(text="b", role="user")])
    kinds = [c.kind for c in out]
    assert "error" in kinds and kinds[-1] == "stream_complete"


async def test_agent_interrupt_keeps_only_what_was_heard() -> None:
    agent = ScriptedAgent("one two three four five six seven eight", delay=0.05)
    station = AgentStation(agent)
    pipeline = Pipeline([station], session_id="s")
    async with pipeline:
        await pipeline.push(TextChunk(text="count", role="user"))
        await asyncio.sleep(0.12)
        pipeline.state.heard[:] = ["one two"]  # what the transport had sent to the device
        await pipeline.interrupt("abort")
    assert agent.interrupted_with == ["one two"]
    last = pipeline.state.history[-1]
    assert (last.role, last.content, last.interrupted) == ("assistant", "one two", True)


async def test_asr_drafts_at_a_pause_reuses_it_for_the_turn_and_forgets_it_when_speech_resumes() -> None:
    from vixio.core.chunk import VADPauseChunk, VADResumeChunk

    asr = ScriptedASR("set the volume to", "set the volume to thirty.")
    out = await run_station(
        ASRStation(asr),
        [
            TurnStartChunk(),
            *frames(loud(0.6)),
            VADPauseChunk(),
            VADResumeChunk(),
            *frames(loud(0.3)),
            VADPauseChunk(),
            *frames(quiet(0.3)),
            TurnEndChunk(),
        ],
    )
    # Two pauses, two drafts; the turn's text is the second, not transcribed a third time.
    assert asr.calls == [(int((0.6 + 0.4) * 32000) - 2, 16000), (int((0.9 + 0.4) * 32000) - 2, 16000)]  # speech_span
    assert [(c.kind, getattr(c, "text", "")) for c in out if c.kind in ("draft_text", "text", "vad_resume")] == [
        ("draft_text", "set the volume to"),
        ("vad_resume", ""),
        ("draft_text", "set the volume to thirty."),
        ("text", "set the volume to thirty."),
    ]


async def test_asr_drafts_at_most_max_drafts_pauses_per_turn() -> None:
    from vixio.core.chunk import VADPauseChunk, VADResumeChunk

    asr = ScriptedASR("one", "one two", "one two three four")
    pauses = [chunk for _ in range(3) for chunk in (*frames(loud(0.3)), VADPauseChunk(), VADResumeChunk())]
    out = await run_station(ASRStation(asr, max_drafts=2), [TurnStartChunk(), *pauses, TurnEndChunk()])
    assert [c.text for c in out if c.kind == "draft_text"] == ["one", "one two"]
    assert [c.text for c in out if c.kind == "text"] == ["one two three four"]  # transcribed at the end
