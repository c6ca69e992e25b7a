"""The capacity benchmarks' parts, shared by bench/bench_capacity.py, bench_fleet.py, bench_idle.py,
bench_first_turn.py, bench_latency.py, bench_memory.py and bench_soak.py (each is still one
command: `python bench/bench_capacity.py`).

- `fakes`: OpenAI-compatible ASR, LLM and TTS servers that answer at once (a process of their own).
- `load`: the firmware-like device load generator (real Opus, real MCP), run as a child process.
- `idle`: idle devices connecting and leaving, run as a child process.
- `floor`: the in-run floor (Opus decode + Silero VAD per 60 ms frame) and the CPU model.
- `procs`: child processes, process trees and their CPU from /proc.
- `server`: vixio under load (`vixio serve` with the fakes).
- `fleet`: several vixio processes sharing Redis, and Redis's own counters.
- `isolation`: one noisy session's effect on the others.
- `report`: tables, ratios and percentiles.
- `selfcheck`: the load generator measured alone (`python bench/capacity/selfcheck.py`).

The benchmark scripts put `bench/` on `sys.path`, so these import as `capacity.<part>`.
"""
