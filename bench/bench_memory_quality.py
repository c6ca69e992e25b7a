"""What a household's memory holds after N conversations (N = 1, 10, 50), by extractor, and what
erasing costs.

Run: .venv/bin/python bench/bench_memory_quality.py [--households 20] [--json out.json]

Synthetic households (seeded, English and Mandarin) talk to a device over N conversations of 8
turns: facts are said once, in several phrasings (some the rules know, some they do not), between
small talk and questions; some change later ("I like coffee now, not tea"). After N conversations
the truth is the facts as last said. Each extractor runs through the real learner
(vixio/state/fact_learner.py) on a real SQLite store:

- **rules** (`memory.long_term: facts`, the offline default): vixio/state/fact_rules.py.
- **cloud-like** (`long_term: model`): the rules, plus a scripted model that answers every 10
  utterances with JSON: the true facts of those utterances, missing 5 % of them and inventing one
  ungrounded fact in 1 batch of 5 (what the JSON check must drop).
- **verbatim** (the earlier default): the latest turns as said, 600 characters (recall: a true
  value appears in the text).

Per extractor and N: stored recall (true facts in the store), in-instructions recall (true facts
in the 600-character note for a neutral question), stale (changed facts still held), noise
(stored facts that are not true) and the name's presence in the note. Then: rules CPU per
utterance, the WAL checkpoint after an erase (ms, percentiles), and the residue of an erased
word in state.db/-wal/-shm with and without the erase path.

Every figure is printed beside the CPU model and the in-run floor (Opus decode + Silero per
60 ms frame, bench/capacity/floor.py). `EXTRA_SECTIONS` is the hook for more figures in this
report (speaker identification's EER, CPU and added latency): append (title, function) and the
function's dict is printed and put in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capacity.floor import cpu_model, measure_floor
from capacity.load import build_clips
from vixio.memory.long_term import VerbatimMemory
from vixio.state.fact_learner import FactLearner
from vixio.state.fact_merge import facts_note, words
from vixio.state.fact_model import ModelFacts
from vixio.state.fact_rules import extract
from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoredTurn

EXTRA_SECTIONS: list[tuple[str, Callable[[argparse.Namespace], dict[str, Any]]]] = []
"""More sections of this report: (title, function of the arguments -> figures)."""

COUNTS = (1, 10, 50)
TURNS_PER_CONVERSATION = 8
BUDGET = 600
EN_NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack"]
ZH_NAMES = ["小明", "李华", "王芳", "张伟", "刘洋", "陈静", "杨帆", "赵雷", "黄丽", "周杰"]
EN_LIKES = [
    "green tea",
    "coffee",
    "jazz music",
    "hiking",
    "chess",
    "gardening",
    "football",
    "sushi",
    "painting",
    "cycling",
    "opera",
    "baking",
    "swimming",
    "poetry",
    "yoga",
]
ZH_LIKES = ["绿茶", "咖啡", "爬山", "下棋", "唱歌", "钓鱼", "书法", "饺子", "京剧", "游泳", "画画", "跑步"]
EN_CITIES = ["Berlin", "Lisbon", "Toronto", "Osaka", "Madrid", "Dublin"]
ZH_CITIES = ["北京", "上海", "杭州", "成都", "广州", "南京"]
EN_SMALL = [
    "what's the weather like today",
    "tell me a joke",
    "set a timer for ten minutes",
    "what time is it",
    "play some music",
    "how far is the moon",
    "thanks, that was helpful",
    "what should I cook tonight",
]
ZH_SMALL = ["今天天气怎么样", "给我讲个笑话", "现在几点了", "放点音乐", "月亮有多远", "谢谢你", "今晚吃什么好"]


class Household:
    """One household's script: utterances with the facts they state, and the truth as it evolves."""

    def __init__(self, rng: random.Random, index: int) -> None:
        self.zh = index % 2 == 1
        self.rng = rng
        names, likes, cities = (ZH_NAMES, ZH_LIKES, ZH_CITIES) if self.zh else (EN_NAMES, EN_LIKES, EN_CITIES)
        self.name = names[index % len(names)]
        self.likes = rng.sample(likes, 6)
        self.home = rng.choice(cities)
        self.truth: dict[tuple[str, str], str] = {}
        """(kind, value lower) -> value: what holds now."""
        self.stale: set[tuple[str, str]] = set()
        self.pending = self._statements()

    def _statements(self) -> list[tuple[str, list[tuple[str, str]], list[tuple[str, str]]]]:
        """(utterance, facts it states, facts it retracts), in the order they will be said."""
        name, home, (a, b, c, d, e, f) = self.name, self.home, self.likes
        if self.zh:
            said = [
                (f"我叫{name}", [("name", name)], []),
                (f"我喜欢{a}", [("like", a)], []),
                (f"我住在{home}", [("home", home)], []),
                (f"我很喜欢{b}", [("like", b)], []),
                (f"{c}是我的最爱", [("like", c)], []),  # a phrasing the rules miss
                (f"我讨厌{d}", [("dislike", d)], []),
                (f"我现在喜欢{e}，不喜欢{a}了", [("like", e)], [("like", a)]),
                (f"我爱{f}", [("like", f)], []),
            ]
        else:
            said = [
                (f"my name is {name}", [("name", name)], []),
                (f"I like {a}", [("like", a)], []),
                (f"I live in {home}", [("home", home)], []),
                (f"I really enjoy {b}", [("like", b)], []),
                (f"I'm a big fan of {c}", [("like", c)], []),  # a phrasing the rules miss
                (f"I hate {d}", [("dislike", d)], []),
                (f"I like {e} now, not {a}", [("like", e)], [("like", a)]),
                (f"{f} is what I love most", [("like", f)], []),
            ]  # missed too
        return said

    def utterances(self, count: int) -> list[tuple[str, list[tuple[str, str]]]]:
        """One conversation: about one statement in four turns, the rest small talk."""
        out = []
        for _ in range(count):
            if self.pending and self.rng.random() < 0.3:
                text, stated, retracted = self.pending.pop(0)
                for kind, value in retracted:
                    self.truth.pop((kind, value.lower()), None)
                    self.stale.add((kind, value.lower()))
                for kind, value in stated:
                    self.truth[(kind, value.lower())] = value
                out.append((text, stated))
            else:
                out.append((self.rng.choice(ZH_SMALL if self.zh else EN_SMALL), []))
        return out


class ScriptedCloud:
    """A cloud-like extractor: the batch's true facts as JSON, 5 % missed, sometimes one invented."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.truth_of: dict[str, list[tuple[str, str]]] = {}

    async def complete(self, messages: list[dict[str, str]]) -> str:
        said = [line[6:] for line in messages[-1]["content"].splitlines() if line.startswith("User: ")]
        facts = [
            {"kind": kind, "value": value}
            for text in said
            for kind, value in self.truth_of.get(text, [])
            if self.rng.random() >= 0.05
        ]
        if self.rng.random() < 0.2:
            facts.append({"kind": "like", "value": "stamp collecting"})  # never said: the check drops it
        return json.dumps({"facts": facts}, ensure_ascii=False)


async def run_extractor(kind: str, households: int, n: int, folder: Path, seed: int) -> dict[str, float]:
    store = SqliteStore(folder / f"{kind}-{n}.db")
    await store.open()
    cloud = ScriptedCloud(random.Random(seed))
    model = ModelFacts(cloud.complete) if kind == "cloud-like" else None
    stored_hits = noted_hits = truths = stale_held = noise = names_noted = 0
    try:
        for h in range(households):
            rng = random.Random(seed * 1000 + h)
            house = Household(rng, h)
            device = f"02:00:00:00:{h // 256:02x}:{h % 256:02x}"
            verbatim = ""
            for conversation in range(n):
                learner = FactLearner(store, device, await store.facts(device), model=model)
                turns = []
                for seq, (text, stated) in enumerate(house.utterances(TURNS_PER_CONVERSATION)):
                    cloud.truth_of[text] = stated
                    at = time.time()
                    turn = StoredTurn(f"c{conversation}", seq, text, "OK.", at=at)
                    turns.append(turn)
                    if kind != "verbatim":
                        await store.put_turn(device, turn)
                        learner.heard(turn.conversation, seq, text, at)
                if kind == "verbatim":
                    verbatim = await VerbatimMemory(BUDGET).update(verbatim, turns)
                else:
                    await learner.finish()
            facts = await store.facts(device)
            held = {(f.kind, f.value.lower()) for f in facts}
            note = facts_note(facts, BUDGET, query="how are you") if kind != "verbatim" else verbatim
            truths += len(house.truth)
            for key, value in house.truth.items():
                if kind == "verbatim":
                    found = words(value) <= words(verbatim)
                    stored_hits += found
                    noted_hits += found
                else:
                    stored_hits += key in held
                    noted_hits += value.lower() in note.lower()
            if kind != "verbatim":
                stale_held += len(house.stale & held)
                noise += len(held - set(house.truth))
            names_noted += (
                bool(house.truth) and house.name.lower() in note.lower() and ("name", house.name.lower()) in house.truth
            )
    finally:
        await store.close()
    return {
        "stored_recall": round(stored_hits / max(1, truths), 3),
        "note_recall": round(noted_hits / max(1, truths), 3),
        "stale_held": stale_held,
        "noise": noise,
        "truths": truths,
        "households_with_name_in_note": names_noted,
    }


def rules_cpu_us() -> float:
    texts = [text for house in (Household(random.Random(i), i) for i in range(10)) for text, _, _ in house.pending]
    texts += EN_SMALL + ZH_SMALL
    started = time.thread_time()
    for _ in range(50):
        for text in texts:
            extract(text)
    return round(1e6 * (time.thread_time() - started) / (50 * len(texts)), 1)


async def erase_costs(folder: Path) -> dict[str, Any]:
    """The checkpoint after each erase, and what an erased word leaves in the files."""
    store = SqliteStore(folder / "erase.db")
    await store.open()
    device = "02:00:00:00:ee:01"
    for i in range(200):
        await store.put_turn(device, StoredTurn("c", i, f"turn {i} about Marigold the cat", "OK.", at=time.time()))
    store._thread.checkpoints.clear()  # only the erases below
    started = time.perf_counter()
    for i in range(0, 200, 2):
        await store.delete_turn(device, "c", i)
    per_erase = (time.perf_counter() - started) / 100
    await store.forget_device(device)
    checkpoints = sorted(store.checkpoints)
    path = Path(store.location)
    residue = {
        p.name: p.read_bytes().count(b"Marigold")
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
        if p.exists()
    }
    await store.close()
    # The same writes and erase without the erase path (plain DELETE, no checkpoint, no secure_delete).
    raw_path = folder / "plain.db"
    raw = sqlite3.connect(raw_path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA secure_delete = OFF")
    raw.execute("CREATE TABLE turns (text TEXT)")
    for i in range(200):
        raw.execute("INSERT INTO turns VALUES (?)", (f"turn {i} about Marigold the cat",))
    raw.execute("DELETE FROM turns")
    plain = {
        p.name: p.read_bytes().count(b"Marigold")
        for p in (raw_path, raw_path.with_name(raw_path.name + "-wal"))
        if p.exists()
    }
    raw.close()
    return {
        "checkpoint_ms_p50": round(1000 * checkpoints[len(checkpoints) // 2], 3),
        "checkpoint_ms_p95": round(1000 * checkpoints[int(len(checkpoints) * 0.95)], 3),
        "erase_ms_mean_with_checkpoint": round(1000 * per_erase, 3),
        "checkpoints": len(checkpoints),
        "residue_after_erase": residue,
        "residue_plain_delete_no_checkpoint": plain,
    }


async def main(args: argparse.Namespace) -> int:
    floor = measure_floor(build_clips()[:8])
    report: dict[str, Any] = {"cpu": cpu_model(), "floor": floor, "quality": {}}
    print(
        f"CPU: {report['cpu']}; floor {floor['ms_per_frame']} ms/frame (Opus {floor['opus_decode_ms']} + "
        f"Silero {floor['silero_ms']})"
    )
    with tempfile.TemporaryDirectory(prefix="vixio-memq-") as folder:
        for n in COUNTS:
            for kind in ("rules", "cloud-like", "verbatim"):
                figures = await run_extractor(kind, args.households, n, Path(folder), args.seed)
                report["quality"][f"{kind}@{n}"] = figures
                print(
                    f"N={n:>2} {kind:<10} stored recall {figures['stored_recall']:.1%}, in the note "
                    f"{figures['note_recall']:.1%}, stale held {figures['stale_held']}, noise {figures['noise']}, "
                    f"name in the note {figures['households_with_name_in_note']} "
                    f"(of {figures['truths']} true facts, {args.households} households)"
                )
        report["rules_cpu_us_per_utterance"] = rules_cpu_us()
        print(
            f"rules: {report['rules_cpu_us_per_utterance']} us CPU per utterance "
            f"({report['rules_cpu_us_per_utterance'] / 1000 / floor['ms_per_frame']:.3f} x the floor's frame)"
        )
        report["erase"] = await erase_costs(Path(folder))
        erase = report["erase"]
        print(
            f"erase: checkpoint p50 {erase['checkpoint_ms_p50']} ms, p95 {erase['checkpoint_ms_p95']} ms "
            f"({erase['checkpoints']} erases; {erase['checkpoint_ms_p50'] / floor['ms_per_frame']:.0f} x the floor's "
            f"frame); delete_turn with it {erase['erase_ms_mean_with_checkpoint']} ms mean; an erased word left in "
            f"{erase['residue_after_erase']} (plain DELETE, no checkpoint: {erase['residue_plain_delete_no_checkpoint']})"
        )
    for title, section in EXTRA_SECTIONS:
        report[title] = section(args)
        print(f"{title}: {report[title]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--households", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", default="")
    sys.exit(asyncio.run(main(parser.parse_args())))
