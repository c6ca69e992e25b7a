"""Backends behind the stations: one folder per kind (vad/, asr/, tts/, agent/), one file per backend."""
