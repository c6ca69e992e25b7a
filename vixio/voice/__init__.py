"""The voice stack a config builds: providers per section, the stations of a session, its agent and its tools."""
