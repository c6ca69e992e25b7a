from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vixio.core.chunk import (
    AudioChunk,
    EmotionChunk,
    ErrorChunk,
    StreamCompleteChunk,
    TextChunk,
    TextDeltaChunk,
    ThoughtChunk,
    TurnEndChunk,
)
from vixio.stations import ApologyStation, SentenceAggregatorStation, TextAggregatorStation, TTSStation
from vixio.stations.sentences.text import find_sentence_end, speakable
from vixio.testing.harness import run_station

from .fakes import ToneTTS

pytestmark = pytest.mark.unit


def deltas(*parts: str) -> list[TextDeltaChunk]:
    return [TextDeltaChunk(text=p, role="assistant") for p in parts]


def spoken(out: list) -> list[str]:
    return [c.text for c in out if isinstance(c, TextChunk)]


async def test_sentences_emotion_and_markdown_stripping() -> None:
    out = await run_station(
        SentenceAggregatorStation(),
        [
            *deltas("😀 Hel", "lo there! How are", " you today? I am **fine**", ", thanks."),
            StreamCompleteChunk(source="agent"),
        ],
    )
    assert isinstance(out[0], EmotionChunk) and out[0].emotion == "happy"
    assert spoken(out) == ["Hello there!", "How are you today?", "I am fine, thanks."]
    assert isinstance(out[-1], StreamCompleteChunk)


async def test_first_sentence_breaks_early_at_a_comma_later_ones_do_not() -> None:
    out = await run_station(
        SentenceAggregatorStation(first_clause_min_chars=10),
        [
            *deltas("The weather in Paris, as far as I know, ", "is sunny. Later, it rains, they say."),
            StreamCompleteChunk(),
        ],
    )
    assert spoken(out) == ["The weather in Paris,", "as far as I know, is sunny.", "Later, it rains, they say."]


async def test_chinese_punctuation_decimals_and_default_emotion() -> None:
    out = await run_station(
        SentenceAggregatorStation(default_emotion="neutral"),
        [
            *deltas("你好！今天", "气温是3.5度。", "Pi is 3.14 exactly"),
            StreamCompleteChunk(),
        ],
    )
    assert out[0].emotion == "neutral"
    assert spoken(out) == ["你好！", "今天气温是3.5度。", "Pi is 3.14 exactly"]


async def test_run_on_text_is_cut_so_speech_can_start() -> None:
    out = await run_station(
        SentenceAggregatorStation(max_sentence_chars=40),
        [
            *deltas("la France, " * 10),
            StreamCompleteChunk(),
        ],
    )
    sentences = spoken(out)
    assert len(sentences) >= 3 and all(len(s) <= 40 for s in sentences)
    assert " ".join(sentences) == speakable("la France, " * 10)


async def test_code_blocks_are_never_spoken() -> None:
    out = await run_station(
        SentenceAggregatorStation(),
        [
            *deltas("Here is code.\n```py", "thon\nprint('x')\nx = 1\n", "```\nDone now. `inline` stays."),
            StreamCompleteChunk(),
        ],
    )
    assert spoken(out) == ["Here is code.", "Done now.", "inline stays."]


async def test_tool_markup_and_reasoning_are_never_spoken() -> None:
    reply = (
        '<think>The user wants the volume.</think>Sure, one moment. <function_calls><invoke name="set_vol'
        'ume"><parameter name="volume">30</parameter></invoke></function_calls>Setting it now. '
        "<<<[TOOL_REQUEST]>>>\ntool_name:「始」get_time「末」\n<<<[END_TOOL_REQUEST]>>> Done."
    )
    pieces = [reply[i : i + 3] for i in range(0, len(reply), 3)]
    out = await run_station(SentenceAggregatorStation(), [*deltas(*pieces), StreamCompleteChunk()])
    assert spoken(out) == ["Sure, one moment.", "Setting it now.", "Done."]
    assert "".join(c.text for c in out if isinstance(c, ThoughtChunk)) == "The user wants the volume."
    assert isinstance(out[0], ThoughtChunk) or isinstance(out[0], EmotionChunk)


async def test_an_unclosed_tool_block_at_the_end_is_dropped() -> None:
    out = await run_station(
        SentenceAggregatorStation(),
        [*deltas('Okay. <function_calls><invoke name="x"><parameter name="a">1'), StreamCompleteChunk()],
    )
    assert spoken(out) == ["Okay."]


async def test_error_drops_the_cut_off_fragment_and_passes_on() -> None:
    # What was said stays said; the unfinished sentence of a broken reply is never spoken.
    out = await run_station(
        SentenceAggregatorStation(),
        [*deltas("Done here. Partial answer that will"), ErrorChunk(source="Agent", message="x")],
    )
    assert spoken(out) == ["Done here."] and isinstance(out[-1], ErrorChunk)
    after = await run_station(
        SentenceAggregatorStation(),
        [*deltas("Cut"), ErrorChunk(source="Agent", message="x"), *deltas("Fresh reply."), StreamCompleteChunk()],
    )
    assert spoken(after) == ["Fresh reply."]


async def test_the_end_of_a_model_call_speaks_the_last_sentence_at_once() -> None:
    end = TextDeltaChunk(text="", role="assistant", ends_text=True)
    # No StreamComplete yet (the agent's bookkeeping after the model call is still running).
    out = await run_station(SentenceAggregatorStation(), [*deltas("It is sunny and twenty degrees today."), end])
    assert [type(c).__name__ for c in out] == ["EmotionChunk", "TextChunk"]
    assert spoken(out) == ["It is sunny and twenty degrees today."]
    out = await run_station(
        SentenceAggregatorStation(),
        [
            *deltas('Let me check. <tool_call>{"name": "get_'),
            end,
            StreamCompleteChunk(source="agent"),
        ],
    )
    assert spoken(out) == ["Let me check."]  # open markup is held back at a model call's end


def test_speakable_and_sentence_end_helpers() -> None:
    assert speakable("# Title\n- **bold** item\n1. [link](http://x) 🎉") == "Title bold item link"
    assert find_sentence_end("Hello. World") == 6
    assert find_sentence_end("Hello.") == -1  # may be "Hello.5": wait for more
    assert find_sentence_end("一二三，四", allow_clause=True, min_clause_chars=3) == 4


async def test_the_first_clause_is_spoken_alone_in_both_languages_when_long_enough() -> None:
    async def sentences(*parts: str) -> list[str]:
        return spoken(
            await run_station(
                SentenceAggregatorStation(first_clause_min_chars=10), [*deltas(*parts), StreamCompleteChunk()]
            )
        )

    assert await sentences("In Beijing today, ", "it is sunny and warm.") == [
        "In Beijing today,",
        "it is sunny and warm.",
    ]
    assert await sentences("Sure, I can do that.") == ["Sure, I can do that."]  # "Sure," is too short alone
    # Four Chinese characters are as long to say as ten Latin ones; two are not.
    assert await sentences("今天北京，", "天气晴朗，气温二十度。") == ["今天北京，", "天气晴朗，气温二十度。"]
    assert await sentences("好的，", "音量调到三十。") == ["好的，音量调到三十。"]
    assert await sentences("北京上海、广州", "都是晴天。") == ["北京上海、", "广州都是晴天。"]


ABBREVIATIONS = (
    "Mrs. Lee met Dr. Ng at 3 p.m. today, e.g. for tea. They flew to the U.S. last week! "
    "Mr. Smith lives on Baker St. near Kew, i.e. in London. It cost $3.50, i.e. 3.5 dollars. "
    "J. K. Rowling vs. C. S. Lewis? Books, toys etc. were sold. We left at 5 p.m. Then it rained. "
    "So do I. 你好。好的！"
)
ABBREVIATION_SENTENCES = [
    "Mrs. Lee met Dr. Ng at 3 p.m. today, e.g. for tea.",
    "They flew to the U.S. last week!",
    "Mr. Smith lives on Baker St. near Kew, i.e. in London.",
    "It cost $3.50, i.e. 3.5 dollars.",
    "J. K. Rowling vs. C. S. Lewis?",
    "Books, toys etc. were sold.",
    "We left at 5 p.m.",
    "Then it rained.",
    "So do I.",
    "你好。",
    "好的！",
]


async def _aggregate(parts: list[str]) -> list[str]:
    """The sentences a SentenceAggregatorStation (no early first clause) makes of these deltas."""
    station = SentenceAggregatorStation(first_clause_min_chars=1000)
    out = []
    for chunk in [*deltas(*parts), StreamCompleteChunk()]:
        out += [c async for c in station.process(chunk)]
    return spoken(out)


async def test_abbreviations_initials_decimals_and_times_do_not_end_a_sentence() -> None:
    assert await _aggregate([ABBREVIATIONS]) == ABBREVIATION_SENTENCES


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Ask Mrs. Lee. Now", "Ask Mrs. Lee."),
        ("Dr. Ng is in. x", "Dr. Ng is in."),
        ("Tea, e.g. green. x", "Tea, e.g. green."),
        ("The U.S. economy grew. x", "The U.S. economy grew."),
        ("Home in the U.S. The end", "Home in the U.S."),
        ("At 3 p.m. today. x", "At 3 p.m. today."),
        ("At 3 p.m. Later", "At 3 p.m."),
        ("Pi is 3.14. x", "Pi is 3.14."),
        ("Me too. I left. x", "Me too."),
        ("你好。Mr. Lee", "你好。"),
        ("一二三；四", "一二三；"),
    ],
)
def test_first_sentence_end(text: str, first: str) -> None:
    assert text[: find_sentence_end(text)] == first


def test_a_maybe_final_abbreviation_waits_for_the_next_word() -> None:
    assert find_sentence_end("We met in the U.S. ") == -1  # "U.S. Army" or "U.S. Then"?
    assert find_sentence_end("We met in the U.S. T") == len("We met in the U.S.")
    assert find_sentence_end("We met in the U.S. a") == -1
    assert find_sentence_end("Call Mrs. ") == -1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(ABBREVIATIONS)), max_size=30))
def test_any_chunking_gives_the_same_sentences(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(ABBREVIATIONS)]
    parts = [ABBREVIATIONS[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    assert asyncio.run(_aggregate(parts)) == ABBREVIATION_SENTENCES


async def test_text_aggregator_joins_user_deltas_and_prefers_a_final_text() -> None:
    user = [
        TextDeltaChunk(text="turn the ", role="user"),
        TextDeltaChunk(text="lights on", role="user"),
        TurnEndChunk(),
    ]
    out = await run_station(TextAggregatorStation(), user)
    assert [(c.kind, getattr(c, "text", "")) for c in out] == [("text", "turn the lights on"), ("turn_end", "")]
    out = await run_station(
        TextAggregatorStation(),
        [
            TextDeltaChunk(text="turn th", role="user"),
            TextChunk(text="turn the lights on", role="user"),
            TurnEndChunk(),
        ],
    )
    assert spoken(out) == ["turn the lights on"]
    assistant = TextDeltaChunk(text="hi", role="assistant")
    assert (await run_station(TextAggregatorStation(), [assistant]))[0] is assistant


async def test_tts_speaks_each_sentence_resampled_to_24k_after_its_subtitle() -> None:
    tts = ToneTTS()
    out = await run_station(
        TTSStation(tts),
        [TextChunk(text="one two", role="assistant"), TextChunk(text="user words", role="user"), StreamCompleteChunk()],
    )
    assert tts.spoken == ["one two"]
    assert [c.kind for c in out][:1] == ["text"] and out[-1].kind == "stream_complete"
    audio = [c for c in out if isinstance(c, AudioChunk)]
    assert audio and all(c.sample_rate == 24000 and c.role == "assistant" for c in audio)
    seconds = sum(c.duration for c in audio)
    assert abs(seconds - 0.1) < 0.01  # two words x 50 ms, resampled without loss


async def test_tts_apologises_for_an_upstream_failure_and_completes_the_turn() -> None:
    tts = ToneTTS()
    out = await run_station(
        TTSStation(tts, apology="Sorry about that."), [ErrorChunk(source="ASRStation", message="down")]
    )
    assert tts.spoken == ["Sorry about that."]
    assert [c.kind for c in out][0] == "error" and out[-1].kind == "stream_complete"
    assert spoken(out) == ["Sorry about that."]


async def test_text_only_apology_shows_the_apology_and_completes_the_turn() -> None:
    error = ErrorChunk(source="AgentStation", message="down")
    out = await run_station(ApologyStation(apology="Sorry about that."), [error])
    assert [type(c) for c in out] == [ErrorChunk, TextChunk, StreamCompleteChunk]
    assert out[1].text == "Sorry about that." and out[1].role == "assistant"
    silent = await run_station(ApologyStation(apology=""), [error, TextChunk(text="next", role="assistant")])
    assert [type(c) for c in silent] == [ErrorChunk, StreamCompleteChunk, TextChunk]  # the reply still ends


@pytest.mark.parametrize(
    "before, after",
    [
        ("It is now 10:", "56 PM on Sunday."),
        ("That costs 3.", "50 euros."),
        ("The answer is 1", "44."),
        ("现在是10:", "56。"),
    ],
)
async def test_a_pause_never_splits_a_number(before: str, after: str) -> None:
    """A model pausing inside "10:56" had "…at 10:" and, 3.6 s later, "56 PM…" spoken apart."""
    pause = TextDeltaChunk(text="", role="assistant", ends_text=True, paused=True)
    out = await run_station(
        SentenceAggregatorStation(), [*deltas(before), pause, *deltas(after), StreamCompleteChunk(source="agent")]
    )
    said = spoken(out)
    assert "".join(said).replace(" ", "") == (before + after).replace(" ", "")
    number = (before.split()[-1] if " " in before else before) + after.split()[0]
    assert any(number.strip("。.") in text for text in said), said
    # What came before the number is still spoken at the pause.
    if " " in before:
        assert said[0] == before.rsplit(" ", 1)[0]
