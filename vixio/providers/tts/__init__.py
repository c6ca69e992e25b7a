"""Text to speech: the `TTSProvider` contract and its backends.

Every backend imports its engine lazily, so importing this package needs none of them.
"""

from vixio.providers.tts.base import TTSError, TTSProvider
from vixio.providers.tts.edge import EdgeTTS
from vixio.providers.tts.espeak import EspeakTTS
from vixio.providers.tts.openai_compatible import OpenAICompatibleTTS
from vixio.providers.tts.piper import PiperTTS

__all__ = ["EdgeTTS", "EspeakTTS", "OpenAICompatibleTTS", "PiperTTS", "TTSError", "TTSProvider"]
