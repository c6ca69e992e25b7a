"""Phrasings of spoken memory requests, labelled: "all" (forget everything: asks to confirm),
"fact" (forget one thing, with its topic), "recall" (what do you remember), None (not a request).

DEV was written first and the rules (vixio/state/spoken.py) written against it; HELD_OUT was
written afterwards, without looking at the rules' patterns again, and is reported separately
(tests/state/test_spoken.py prints both rates; bench/bench_memory_quality.py too). Its first run
missed one ("请把我说过的话都忘掉"), fixed after: held-out figures quoted are that first run's.
"""

from __future__ import annotations

DEV: tuple[tuple[str, str | None, str], ...] = (
    # text, label, topic (for "fact")
    ("Forget everything about me.", "all", ""),
    ("Please forget what I told you", "all", ""),
    ("delete everything you know about me", "all", ""),
    ("clear your memory", "all", ""),
    ("Erase my memory please.", "all", ""),
    ("忘掉我说过的话", "all", ""),
    ("清空你的记忆", "all", ""),
    ("删除关于我的所有信息", "all", ""),
    ("forget that I like green tea", "fact", "green tea"),
    ("Please forget my birthday.", "fact", "birthday"),
    ("can you forget that my sister is called Mary", "fact", "sister"),
    ("忘掉我喜欢绿茶", "fact", "绿茶"),
    ("忘记我的生日", "fact", "生日"),
    ("what do you remember about me", "recall", ""),
    ("What do you know about me?", "recall", ""),
    ("你记得我什么", "recall", ""),
    ("你知道关于我的哪些事情", "recall", ""),
    ("please don't forget what I told you", None, ""),
    ("不要忘记我说的话", None, ""),
    ("don't forget the milk", None, ""),
    ("I forgot my keys again", None, ""),
    ("别忘了明天开会", None, ""),
    ("what is my name", None, ""),
    ("remember that I like green tea", None, ""),
)

HELD_OUT: tuple[tuple[str, str | None, str], ...] = (
    ("Wipe your memory.", "all", ""),
    ("I want you to forget everything I said", "all", ""),
    ("reset your memory please", "all", ""),
    ("Delete all my data.", "all", ""),
    ("forget all about me", "all", ""),
    ("把你的记忆全部删掉", "all", ""),
    ("忘记关于我的一切", "all", ""),
    ("请把我说过的话都忘掉", "all", ""),
    ("Forget that my birthday is in March.", "fact", "birthday"),
    ("could you delete the fact that I hate coffee", "fact", "coffee"),
    ("forget about my dog", "fact", "dog"),
    ("请忘掉我住在北京", "fact", "北京"),
    ("删除我喜欢咖啡这件事", "fact", "咖啡"),
    ("Tell me what you know about me", "recall", ""),
    ("what have you learned about me", "recall", ""),
    ("关于我你都记得什么", "recall", ""),
    ("你了解我多少", "recall", ""),
    ("Never forget my name!", None, ""),
    ("make sure you don't forget my birthday", None, ""),
    ("千万别忘了我的生日", None, ""),
    ("不要删除我的记忆", None, ""),
    ("how do I delete an app on my phone", None, ""),
    ("I always forget where I put my glasses", None, ""),
    ("我老是忘记带钥匙", None, ""),
)
