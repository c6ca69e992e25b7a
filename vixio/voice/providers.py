"""The providers a config names, built (and the offline TTS fallback loaded): one place that maps
each config section to its provider class, so `VoiceStack` and its profiles build them alike.
Provider modules are imported here, inside each function: an extra that is not installed only
matters to a config that names it.
"""

from __future__ import annotations

from typing import TypedDict

from loguru import logger

from vixio.config.extras import install_hint
from vixio.config.models import VixioConfig
from vixio.config.needs import missing_key
from vixio.config.pipeline import (
    EdgeTTSConfig,
    EspeakTTSConfig,
    FasterWhisperASRConfig,
    LitellmAgentConfig,
    LocalLlamaAgentConfig,
    OfflineTTSConfig,
    OpenAIASRConfig,
    OpenAITTSConfig,
    PiperTTSConfig,
    TTSConfig,
)
from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.providers.agent.base import AgentProvider
from vixio.providers.asr.base import ASRProvider
from vixio.providers.prewarm import Prewarmer
from vixio.providers.tts.base import TTSProvider
from vixio.providers.vad.base import VADProvider


def text_protocol(config: VixioConfig) -> TextToolProtocol:
    assert config.agent is not None
    if config.agent.tool_protocol == "xml":
        from vixio.core.tools.protocols.xml import XmlProtocol

        return XmlProtocol(result_format=config.agent.xml_results)
    from vixio.core.tools.protocols.vcp import VcpProtocol

    return VcpProtocol(fuzzy=config.agent.vcp_fuzzy_markers)


def provider_kind(section: object) -> str:
    return getattr(section, "provider", "off")


def make_vad(config: VixioConfig) -> VADProvider:
    if config.vad.provider == "silero-torch":
        from vixio.providers.vad.silero_torch import SileroTorchVAD

        return SileroTorchVAD(16000)
    if config.vad.provider == "silero-lite":
        from vixio.providers.vad.silero_lite import SileroLiteVAD

        return SileroLiteVAD(16000)
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    return SileroOnnxVAD(16000)


def make_asr(config: VixioConfig) -> ASRProvider:
    asr = config.asr
    if isinstance(asr, FasterWhisperASRConfig):
        from vixio.providers.asr.faster_whisper import FasterWhisperASR

        return FasterWhisperASR(
            model=asr.model, language=asr.language, compute_type=asr.compute_type, cpu_threads=asr.cpu_threads
        )
    assert isinstance(asr, OpenAIASRConfig)
    from vixio.providers.asr.openai_compatible import OpenAICompatibleASR

    return OpenAICompatibleASR(
        asr.api_base,
        asr.api_key,
        model=asr.model,
        language=asr.language,
        timeout=asr.timeout,
        missing_key=missing_key(asr, "asr"),
    )


async def load_tts_fallback(config: VixioConfig) -> TTSProvider | None:
    """The offline voice that speaks while the TTS fails, loaded: `tts.fallback`, or for "auto" the
    one installed (Piper for English, else espeak-ng in the config's language)."""
    from vixio.config.needs import auto_fallback

    wanted = getattr(config.tts, "fallback", None)
    chosen = auto_fallback(config.language) if wanted == "auto" else wanted
    if wanted == "auto" and chosen is None:
        logger.warning(
            "tts: no offline voice is installed to speak while the {} TTS fails (replies would be shown, "
            "not heard): {}",
            provider_kind(config.tts),
            install_hint("piper" if config.language == "en" else "espeak"),
        )
    if chosen is None:
        return None
    fallback = make_tts(chosen, "tts.fallback")
    try:
        await fallback.initialize()
    except Exception as exc:
        if wanted != "auto":
            raise
        logger.warning(
            "tts: the offline fallback voice ({}) did not load, none will speak while the TTS fails: {}",
            fallback.name,
            exc,
        )
        return None
    logger.info(
        "tts: {} speaks while the {} TTS fails{}",
        fallback.name,
        provider_kind(config.tts),
        " (tts.fallback: auto)" if wanted == "auto" else "",
    )
    return fallback


def make_tts(tts: TTSConfig | OfflineTTSConfig, name: str = "tts") -> TTSProvider:
    if isinstance(tts, PiperTTSConfig):
        from vixio.providers.tts.piper import PiperTTS

        return PiperTTS(voice=tts.voice, length_scale=tts.length_scale)
    if isinstance(tts, EspeakTTSConfig):
        from vixio.providers.tts.espeak import EspeakTTS

        return EspeakTTS(voice=tts.voice, rate_wpm=tts.rate_wpm)
    if isinstance(tts, EdgeTTSConfig):
        from vixio.providers.tts.edge import EdgeTTS

        return EdgeTTS(
            tts.voice,
            rate=tts.rate,
            pitch=tts.pitch,
            volume=tts.volume,
            timeout=tts.timeout,
            service_url=tts.service_url,
        )
    assert isinstance(tts, OpenAITTSConfig)
    from vixio.providers.tts.openai_compatible import OpenAICompatibleTTS

    return OpenAICompatibleTTS(
        tts.api_base,
        tts.api_key,
        model=tts.model,
        voice=tts.voice,
        response_format=tts.response_format,
        sample_rate=tts.sample_rate,
        timeout=tts.timeout,
        extra_body=tts.extra_body,
        missing_key=missing_key(tts, name),
    )


class _LocalTuning(TypedDict, total=False):
    """What `agent:` may set of a local provider's sampling."""

    temperature: float
    max_tokens: int


def make_agent(config: VixioConfig) -> AgentProvider:
    agent = config.agent
    if isinstance(agent, LocalLlamaAgentConfig):
        from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider

        local: type[LocalLlamaAgentProvider] = LocalLlamaAgentProvider
        if agent.runtime == "mistralrs":
            from vixio.providers.agent.mistralrs.provider import LocalMistralrsAgentProvider

            local = LocalMistralrsAgentProvider
        tuning: _LocalTuning = {}  # unset: the provider's defaults
        if agent.temperature is not None:
            tuning["temperature"] = agent.temperature
        if agent.max_tokens is not None:
            tuning["max_tokens"] = agent.max_tokens
        return local(
            agent.model_path,
            n_ctx=agent.n_ctx,
            timeout=agent.timeout,
            max_history_messages=agent.max_history_messages,
            **tuning,
        )
    assert isinstance(agent, LitellmAgentConfig)
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

    return OpenAIAgentProvider(
        agent.model,
        api_base=agent.api_base,
        api_key=agent.api_key or None,
        missing_key=missing_key(agent, "agent"),
        max_tool_iterations=config.tools.max_iterations,
        temperature=agent.temperature,
        max_tokens=agent.max_tokens,
        timeout=agent.timeout,
        tracing=agent.tracing,
        max_history_messages=agent.max_history_messages,
        openai_direct=agent.openai_direct,
    )


def make_prewarmer(config: VixioConfig, asr: ASRProvider | None, tts: TTSProvider | None) -> Prewarmer | None:
    """What warms the cloud APIs of this config as a device connects and its user starts speaking
    (`pipeline.prewarm`; providers/prewarm.py): each provider's `warm()`, the agent's through a
    provider of this config (its pool is the sessions' shared one); None when off."""
    if not config.pipeline.prewarm:
        return None
    agent = make_agent(config) if config.agent is not None else None
    return Prewarmer([provider.warm for provider in (asr, tts, agent) if provider is not None])
