"""The ASR station and its helper (what a pause's transcript says about the turn)."""
