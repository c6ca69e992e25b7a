"""Does the ONNX runtime compute what llama.cpp computes? The same GGUF, the same prompt tokens (the
first turn of each household conversation, bench/household.json, with the voice stack's no-tools
system prompt), greedy: how many of the first MAX_TOKENS generated tokens are the same, in order,
and how far apart the first token's logits are.

Run: .venv/bin/python bench/bench_onnx_parity.py [MODEL.gguf]   (needs vixio[local-onnx,local-llm])

Both quantize the products' inputs to 8 bits per block of 32, each its own way, so the logits
differ slightly and a greedy path may part where two tokens are close; what parts is printed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MAX_TOKENS = 32


def main() -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from llama_cpp import Llama

    from capacity.floor import cpu_model
    from vixio.config.languages import language_pack
    from vixio.providers.agent.instructions import TurnInstructions
    from vixio.providers.agent.llama.weights import smollm2_model_path
    from vixio.providers.agent.ort.engine import OnnxChat

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else smollm2_model_path()
    print(f"CPU: {cpu_model()}; model {path.name}; greedy, {MAX_TOKENS} tokens")
    engine = OnnxChat(path, n_ctx=2048, threads=1)
    # logits_all: llama-cpp-python keeps the logits in `scores` only so (1,024 x vocab floats)
    llama = Llama(model_path=str(path), n_ctx=1024, n_threads=1, n_batch=256, logits_all=True, verbose=False)
    same_total = produced = identical = 0
    for conversation in json.loads((HERE / "household.json").read_text())["conversations"]:
        pack = language_pack(conversation["lang"])
        system = TurnInstructions(pack.system_prompt, clock_note=pack.clock_note, weekdays=pack.weekdays)()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": conversation["turns"][0]["say"]}]
        prompt = engine.prompt_tokens(messages)
        engine.reset()
        llama.reset()
        ours, theirs = engine.begin(prompt), None
        llama.eval(prompt)
        theirs = np.asarray(llama.scores[llama.n_tokens - 1], dtype=np.float32)
        gap = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        ours_tokens: list[int] = []
        theirs_tokens: list[int] = []
        for _ in range(MAX_TOKENS):
            ours_tokens.append(int(np.argmax(ours)))
            if ours_tokens[-1] in engine.stop_tokens:
                break
            ours = engine.append([ours_tokens[-1]])
        for _ in range(MAX_TOKENS):
            theirs_tokens.append(int(np.argmax(llama.scores[llama.n_tokens - 1])))
            if theirs_tokens[-1] in engine.stop_tokens:
                break
            llama.eval([theirs_tokens[-1]])
        same = next((i for i, (a, b) in enumerate(zip(ours_tokens, theirs_tokens, strict=False)) if a != b), None)
        same = min(len(ours_tokens), len(theirs_tokens)) if same is None else same
        whole = ours_tokens == theirs_tokens
        same_total, produced, identical = same_total + same, produced + len(theirs_tokens), identical + whole
        print(
            f"  {same:2d}/{len(theirs_tokens):2d} tokens the same{' (all)' if whole else ''}; first-token logits "
            f"{100 * gap:.1f} % apart  {conversation['turns'][0]['say']!r}"
            + ("" if whole else f" -> parts at {engine.tokenizer.decode(ours_tokens[: same + 1])!r}")
        )
    print(
        f"\n{same_total} of {produced} llama.cpp tokens generated the same before the paths part; "
        f"{identical} of the conversations' first replies identical"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
