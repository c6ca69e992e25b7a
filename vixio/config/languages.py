"""The language switch: built-in spoken texts and voice defaults for each supported language.

`language: zh` at the top of config.yaml sets everything a listener hears or the models are
told — Whisper's language and model, the default voices, the greeting, every `speech.*` text,
the idle goodbye, the activation prompt, the words that confirm or refuse a tool call and the default system prompt.
A key written in the config file always wins over the language's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from vixio.config.models import VixioConfig

Language = Literal["en", "zh"]


@dataclass(frozen=True, slots=True)
class LanguagePack:
    """What one language sets when the config file does not say otherwise."""

    whisper_language: str
    """ISO 639-1 code handed to Whisper (and to OpenAI-compatible ASR APIs)."""
    whisper_model: str
    """The offline Whisper model that can hear this language."""
    espeak_voice: str
    edge_voice: str
    system_prompt: str
    greeting: str
    idle_goodbye: str
    """Spoken before an idle close when `xiaozhi.idle_goodbye: true`."""
    activation_message: str
    """What the device shows and speaks while it waits to be bound; `{code}` is the 6-digit code."""
    speech: Mapping[str, str]
    """Texts for `speech.*` keys by name; a key whose built-in default is empty (off) stays off."""
    confirm_yes: tuple[str, ...]
    """A reply starting with one of these approves a tool call that asked for confirmation."""
    confirm_no: tuple[str, ...]
    """A reply containing one of these refuses it, whatever else it says."""
    clock_note: str
    """The date-and-time sentence every model call's instructions end with (see
    vixio.providers.agent.instructions.TurnInstructions for its fields)."""
    weekdays: tuple[str, ...]
    """Monday first."""
    no_tools_note: str
    """Told to a model offered no tools: it cannot act or look anything up, and must say so."""
    smoke_question: str = "what time is it"
    """The question the startup banner's `vixio device --text` example asks."""


LANGUAGES: Mapping[str, LanguagePack] = {
    "en": LanguagePack(
        whisper_language="en",
        whisper_model="tiny.en",
        espeak_voice="en-us",
        edge_voice="en-US-AriaNeural",
        system_prompt=(
            "You are a friendly voice assistant on a small speaker. Answer in one to three short "
            "spoken sentences, without markdown, lists or emoji except an optional leading one."
        ),
        greeting="Hi, how can I help?",
        idle_goodbye="Talk to you later!",
        activation_message="Activation code: {code}",
        speech={
            "apology": "Sorry, something went wrong. Please try again.",
            "empty_reply": "Sorry, I have no answer to that.",
            "filler": "One moment.",
        },
        confirm_yes=(
            "yes",
            "yeah",
            "yep",
            "yup",
            "sure",
            "ok",
            "okay",
            "confirm",
            "confirmed",
            "correct",
            "right",
            "go ahead",
            "do it",
            "please do",
            "of course",
            "absolutely",
        ),
        confirm_no=("no", "nope", "not", "don't", "do not", "cancel", "stop", "never"),
        clock_note=(
            "It is now {time12} on {weekday}, {day} {month_name} {year} ({zone} time). Use this to answer "
            "any question about the time, the date or the day of the week."
        ),
        weekdays=("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
        no_tools_note=(
            "You have no tools: you cannot change anything on the device (volume, brightness, lights, "
            "settings) and you cannot look anything up (weather, news, the internet). When asked to do "
            "such a thing, say plainly that you can't do that here. Never say or imply that you did it."
        ),
    ),
    "zh": LanguagePack(
        whisper_language="zh",
        whisper_model="base",
        espeak_voice="cmn",
        edge_voice="zh-CN-XiaoxiaoNeural",
        system_prompt=(
            "你是一个友好的智能音箱语音助手。请始终用简体中文回答，用一到三句简短的口语句子，"
            "不要使用markdown、列表或表情符号（开头可以有一个表情）。"
        ),
        greeting="你好，有什么可以帮你？",
        idle_goodbye="我先休息了，有需要再叫我。",
        activation_message="激活码：{code}",
        speech={
            "apology": "抱歉，出了点问题，请再说一遍。",
            "empty_reply": "抱歉，这个问题我答不上来。",
            "filler": "请稍等。",
        },
        # Whisper often writes Mandarin in traditional characters: both forms are listed.
        confirm_yes=(
            "是",
            "是的",
            "好",
            "好的",
            "好啊",
            "可以",
            "行",
            "确定",
            "確定",
            "确认",
            "確認",
            "对",
            "對",
            "对的",
            "對的",
            "嗯",
            "没问题",
            "沒問題",
            "当然",
            "當然",
            "ok",
            "okay",
            "yes",
        ),
        confirm_no=("不", "别", "別", "取消", "算了", "no"),
        clock_note="现在是{year}年{month}月{day}日 {weekday} {time24}（{zone}时间）。回答时间、日期和星期的问题时以此为准。",
        weekdays=("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"),
        no_tools_note=(
            "你没有任何工具：不能更改设备上的任何东西（音量、亮度、灯光、设置），也不能查询任何信息（天气、新闻、"
            "网络）。用户要求这类事情时，请直接说明你在这里做不到，绝不要说或暗示你已经做了。"
        ),
        smoke_question="现在几点了",
    ),
}


def language_pack(language: str) -> LanguagePack:
    return LANGUAGES[language]


def apply_language(config: VixioConfig) -> VixioConfig:
    """Fill every key the config file left out with `config.language`'s text; refuse
    combinations that would speak or hear the wrong language."""
    from vixio.config.pipeline import (
        EdgeTTSConfig,
        EspeakTTSConfig,
        FasterWhisperASRConfig,
        LocalLlamaAgentConfig,
        OpenAIASRConfig,
        PiperTTSConfig,
    )

    pack = language_pack(config.language)
    xiaozhi = config.xiaozhi
    if "greeting" not in xiaozhi.model_fields_set:
        xiaozhi.greeting = pack.greeting
    if "message" not in xiaozhi.activation.model_fields_set:
        xiaozhi.activation.message = pack.activation_message
    speech = config.speech
    for name, field in type(speech).model_fields.items():
        if name in speech.model_fields_set or name not in pack.speech:
            continue
        if isinstance(field.default, str) and field.default:  # a text that is off by default stays off
            setattr(speech, name, pack.speech[name])
    tools = config.tools
    if "confirm_words" not in tools.model_fields_set:
        tools.confirm_words.yes = list(pack.confirm_yes)
        tools.confirm_words.no = list(pack.confirm_no)
    if config.agent is not None and "system_prompt" not in config.agent.model_fields_set:
        config.agent.system_prompt = pack.system_prompt

    asr = config.asr
    if isinstance(asr, FasterWhisperASRConfig | OpenAIASRConfig) and "language" not in asr.model_fields_set:
        if isinstance(asr, FasterWhisperASRConfig) or config.language != "en":
            asr.language = pack.whisper_language
    if isinstance(asr, FasterWhisperASRConfig) and "model" not in asr.model_fields_set:
        asr.model = pack.whisper_model
    tts = config.tts
    if isinstance(tts, EspeakTTSConfig | EdgeTTSConfig) and "voice" not in tts.model_fields_set:
        tts.voice = pack.espeak_voice if isinstance(tts, EspeakTTSConfig) else pack.edge_voice
    fallback = getattr(tts, "fallback", None)
    if isinstance(fallback, EspeakTTSConfig) and "voice" not in fallback.model_fields_set:
        fallback.voice = pack.espeak_voice

    if config.language != "en":
        problems = []
        if isinstance(asr, FasterWhisperASRConfig) and asr.model.endswith(".en"):
            problems.append(f"asr.model {asr.model!r} hears English only; use base (vixio[whisper-multilingual])")
        if isinstance(asr, FasterWhisperASRConfig) and asr.language not in (pack.whisper_language, None):
            problems.append(f"asr.language is {asr.language!r}; use {pack.whisper_language!r} or null")
        if isinstance(tts, PiperTTSConfig) and tts.voice is None:
            problems.append(
                "tts.provider piper has only an English voice built in; use edge, espeak or openai, "
                "or set tts.voice to a Piper voice of this language"
            )
        if isinstance(config.agent, LocalLlamaAgentConfig) and config.agent.model_path is None:
            problems.append(
                "agent.provider local-llama's bundled SmolLM2 answers in English only; use "
                "agent.provider litellm (DeepSeek, Qwen, Ollama...) or a model_path of this language"
            )
        if problems:
            raise ValueError(f"language {config.language}: " + "; ".join(problems))
    return config
