"""What a config needs from the machine: the pip extras of its providers, and API keys.

`provider_needs` maps a config to the rows of `vixio.config.extras.PROVIDER_EXTRAS` it runs; the
extras it prints and the modules `vixio serve` and `vixio config check` look for come from there.

`vixio config extras --config FILE` prints the extras (what `make serve CONFIG=FILE` installs);
`missing_keys` names the cloud providers whose key is neither in the file nor in the
environment, so the server says so at startup instead of failing on the first question.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from vixio.config.extras import PROVIDER_EXTRAS
from vixio.config.languages import language_pack
from vixio.config.models import VixioConfig
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
from vixio.config.profiles import ProfileErrors, effective_config
from vixio.config.vision import VisionConfig

# litellm reads these when the config gives no key; local servers (ollama...) need none.
_KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "dashscope": "DASHSCOPE_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "groq": "GROQ_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "moonshot": "MOONSHOT_API_KEY",
    "volcengine": "VOLCENGINE_API_KEY",
    "zai": "ZAI_API_KEY",
}
_KEYLESS = {"ollama", "ollama_chat", "hosted_vllm", "lm_studio", "llamafile"}


def provider_needs(config: VixioConfig) -> list[tuple[str, str, str]]:
    """(config key, provider, `PROVIDER_EXTRAS` key) for everything this config runs, transport first."""
    needs = [("xiaozhi", "xiaozhi", "transport:xiaozhi")]
    if config.asr is not None:
        needs.append(("vad", config.vad.provider, f"vad:{config.vad.provider}"))
        asr = config.asr
        if isinstance(asr, FasterWhisperASRConfig):
            packaged = f"asr:faster-whisper:{asr.model}"  # tiny.en, base; else a local directory
            needs.append(
                ("asr", asr.provider, packaged if packaged in PROVIDER_EXTRAS else "asr:faster-whisper:directory")
            )
        else:
            needs.append(("asr", asr.provider, f"asr:{asr.provider}"))
    agent = config.agent
    if isinstance(agent, LocalLlamaAgentConfig):
        runtime = {"mistralrs": "local-mistralrs", "onnx": "local-onnx"}.get(agent.runtime, "local-llama")
        needs.append(("agent", agent.provider, f"agent:{runtime}:{'file' if agent.model_path else 'smollm2'}"))
    elif agent is not None:
        needs.append(("agent", agent.provider, f"agent:{agent.provider}"))
    if config.tts is not None:
        needs.append(("tts", config.tts.provider, _tts_need(config.tts)))
        fallback = getattr(config.tts, "fallback", None)
        if fallback is not None and not isinstance(fallback, str):  # "auto" takes what is installed
            needs.append(("tts.fallback", fallback.provider, _tts_need(fallback)))
    if config.vision is not None:
        needs.append(("vision", "litellm", "vision"))
    if config.state.backend == "redis":
        needs.append(("state", "redis", "state:redis"))
    if config.mqtt.enabled:
        needs.append(("mqtt", "embedded", "transport:mqtt"))
    rows = {row for _, _, row in needs}
    for name in config.profiles:  # what a profile runs that the top-level config does not
        for key, provider, row in provider_needs(profile_config(config, name)):
            if row not in rows:
                rows.add(row)
                needs.append((f"profiles.{name}.{key}", provider, row))
    return needs


def profile_config(config: VixioConfig, name: str) -> VixioConfig:
    """Profile `name` of a validated config as a whole config."""
    errors: list[str] = []
    source = config.model_dump(mode="json", by_alias=True, exclude={"profiles", "devices"})
    found = effective_config(config, source, name, errors)
    if found is None:  # the config was validated: only a profile changed since could fail
        raise ProfileErrors(errors)
    return found


def _tts_need(tts: TTSConfig) -> str:
    if isinstance(tts, PiperTTSConfig):
        return f"tts:piper:{'file' if tts.voice else 'joe'}"
    return f"tts:{tts.provider}"


def required_extras(config: VixioConfig) -> list[str]:
    """The vixio extras this config's providers import, in install order."""
    keys = [key for _, _, key in provider_needs(config)]
    tts = config.tts
    if isinstance(tts, OpenAITTSConfig | EdgeTTSConfig) and isinstance(tts.fallback, str):
        # "auto": the offline voice of the language, so that it is installed to speak while the online
        # one fails (not a need `vixio serve` checks: without it the server runs, replies are shown).
        keys.append("tts:piper:joe" if config.language == "en" else "tts:espeak")
    extras = [PROVIDER_EXTRAS[key].extra for key in keys]
    return list(dict.fromkeys(extra for extra in extras if extra))


def auto_fallback(language: str) -> OfflineTTSConfig | None:
    """The offline voice installed for `language` (`tts.fallback: auto`): Piper's English voice, else
    espeak-ng; None when neither is."""
    if language == "en" and all(_installed(module) for module in PROVIDER_EXTRAS["tts:piper:joe"].modules):
        return PiperTTSConfig(provider="piper")
    if all(_installed(module) for module in PROVIDER_EXTRAS["tts:espeak"].modules):
        return EspeakTTSConfig(provider="espeak", voice=language_pack(language).espeak_voice)
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_keys(config: VixioConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """One sentence per cloud provider that has no API key to send."""
    environ = os.environ if environ is None else environ
    zh = config.language == "zh"  # said in the config's language: its reader set `language`
    problems = []
    agent = config.agent
    if isinstance(agent, LitellmAgentConfig) and missing_key(agent, "agent", environ):
        variable = _litellm_key_variable(agent.model)
        problems.append(
            f"agent.model {agent.model}：没有 API 密钥——{variable} 未设置，agent.api_key 也为空，所以每个回答都会失败"
            f"（用户只会听到 speech.apology）。请先设置：export {variable}=..."
            if zh
            else f"agent.model {agent.model}: no API key — {variable} is not set and agent.api_key is "
            f"empty, so every answer will fail (the user hears speech.apology). Set it: export {variable}=..."
        )
    for section, name in ((config.asr, "asr"), (config.tts, "tts")):
        if isinstance(section, OpenAIASRConfig | OpenAITTSConfig) and missing_key(section, name, environ):
            problems.append(
                f"{name}.api_key 为空（{section.api_base}）：大多数云端 API 会拒绝（HTTP 401）。"
                f"请设置，例如 api_key: ${{SILICONFLOW_API_KEY}}"
                if zh
                else f"{name}.api_key is empty for {section.api_base}; most cloud APIs will refuse "
                f"(HTTP 401). Set it, e.g. api_key: ${{SILICONFLOW_API_KEY}}"
            )
    return problems


def missing_key(section: object, name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """ "agent.api_key is empty (DEEPSEEK_API_KEY unset)" when the provider configured at `name`
    (agent, asr, tts, vision, tts.fallback) calls a cloud API with no key to send; else None.
    Providers add it to their failure messages."""
    environ = os.environ if environ is None else environ
    if isinstance(section, LitellmAgentConfig | VisionConfig) and not section.api_key:
        prefix = section.model.split("/", 1)[0] if "/" in section.model else "openai"
        variable = _litellm_key_variable(section.model)
        if prefix not in _KEYLESS and not section.api_base and not environ.get(variable):
            return f"{name}.api_key is empty ({variable} unset)"
    if (
        isinstance(section, OpenAIASRConfig | OpenAITTSConfig)
        and not section.api_key
        and not section.api_base.startswith(("http://127.", "http://localhost"))
    ):
        return f"{name}.api_key is empty"
    return None


def _litellm_key_variable(model: str) -> str:
    """The environment variable litellm reads the key of `model` from."""
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    return _KEY_VARIABLES.get(prefix, f"{prefix.upper()}_API_KEY")


def print_extras(path: str) -> int:
    """`vixio config extras`: the extras as pip wants them ("xiaozhi,silero-onnx,..."), or the errors."""
    import sys

    from vixio.config.loader import ConfigError, load_config

    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(",".join(required_extras(config)))
    return 0
