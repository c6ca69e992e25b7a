"""The sentence aggregator station and its text helpers (sentence ends, markdown and emoji removal, emotion)."""
