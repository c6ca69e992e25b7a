"""The stations of a voice pipeline, one per file, importable for custom pipelines.

VADStation → TurnDetectorStation → ASRStation → TextAggregatorStation → AgentStation
→ SentenceAggregatorStation → TTSStation (or, text only, ApologyStation)
"""

from vixio.stations.agent.station import AgentStation
from vixio.stations.apology import ApologyStation
from vixio.stations.asr.station import ASRStation
from vixio.stations.sentences.aggregator import SentenceAggregatorStation
from vixio.stations.text_aggregator import TextAggregatorStation
from vixio.stations.tts.station import TTSStation
from vixio.stations.turn_detector import TurnDetectorStation
from vixio.stations.vad import VADStation

__all__ = [
    "ASRStation",
    "AgentStation",
    "ApologyStation",
    "SentenceAggregatorStation",
    "TTSStation",
    "TextAggregatorStation",
    "TurnDetectorStation",
    "VADStation",
]
