"""The in-process mistral.rs backend: the local agent model of vixio.providers.agent.llama on a runtime that installs from a wheel."""
