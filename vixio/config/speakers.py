"""Configuration of speaker identification (voiceprints): who is speaking on a shared device.

    speakers:
      enabled: true
      people: {Tom: {profile: kids}}      # Tom's voice selects the kids profile
    tools:
      require_speaker: ["unlock_door"]    # only an enrolled voice may run it

docs/speakers.md explains enrolment, the measured error rates and what is stored.
"""

from __future__ import annotations

from pydantic import Field

from vixio.core.settings import StrictModel


class PersonConfig(StrictModel):
    """What a recognised person gets."""

    profile: str | None = None
    """A name under `profiles:` their voice selects (e.g. a child's voice: `kids`); unset: the device's."""


class SpeakersConfig(StrictModel):
    """Recognise enrolled voices on each device (needs `memory.enabled`: voiceprints live in the state store)."""

    enabled: bool = False
    """Identify the speaker of every utterance (in a worker thread, in parallel with ASR) and allow enrolment by voice."""
    model: str = "resemblyzer"
    """The speaker encoder: `resemblyzer` (the weights file inside `pip install --no-deps resemblyzer==0.1.4`), a checkpoint of the same network (`.pt`), or an `.onnx` file taking `mels` (batch, 160, 40) and returning (batch, dim)."""
    threshold: float = Field(default=0.9, ge=0.0, le=1.0)
    """Cosine similarity at or above which an utterance is its closest enrolled voice (its person's memory and profile); below, the voice is unknown. Measured on 12 real voices: 97 % of enrolled voices recognised, a stranger taken for someone enrolled 8 % of the time (docs/speakers.md)."""
    tool_threshold: float = Field(default=0.94, ge=0.0, le=1.0)
    """The similarity a voice needs to run a `tools.require_speaker` tool (stricter: a stranger taken for someone opens the door). Measured: no stranger in 72 tries, but a quarter of enrolled voices must say it again."""
    enrol_utterances: int = Field(default=3, ge=1, le=10)
    """Utterances a spoken enrolment collects ("remember my voice, I'm Alice" counts as the first)."""
    wait_ms: int = Field(default=300, ge=0, le=5000)
    """How long a turn waits, after its transcript, for an identification still running (a busy server); past it the turn goes on as an unknown voice."""
    people: dict[str, PersonConfig] = Field(default_factory=dict)
    """Per enrolled name (as spoken at enrolment, any case): the profile their voice selects."""

    def profile_of(self, person: str) -> str | None:
        """The profile `person`'s voice selects, if configured (names compared case-insensitively)."""
        wanted = person.casefold()
        return next((entry.profile for name, entry in self.people.items() if name.casefold() == wanted), None)
