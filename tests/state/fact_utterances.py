"""User utterances labelled with the facts a careful listener would keep (kind, value), for
measuring the rule extractor (tests/state/test_fact_rules.py, bench/bench_memory_quality.py).
Written from how people talk to a speaker, not from the rules' patterns: some are said in ways
the rules do not know (they count as misses), some hold no fact at all (anything found there
is noise)."""

from __future__ import annotations

LABELLED: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("My name is Alice and I like green tea", (("name", "Alice"), ("like", "green tea"))),
    ("Hi, I'm called Bob.", (("name", "Bob"),)),
    ("call me Charlie please", (("name", "Charlie"),)),
    ("I love jazz music", (("like", "jazz music"),)),
    ("I really enjoy hiking", (("like", "hiking"),)),
    ("I hate mushrooms", (("dislike", "mushrooms"),)),
    ("I don't like spicy food", (("dislike", "spicy food"),)),
    ("I live in Berlin", (("home", "Berlin"),)),
    ("We moved to Shanghai last year", (("home", "Shanghai"),)),
    ("My birthday is on March 3rd", (("birthday", "March 3rd"),)),
    ("I was born on 12 May 1990", (("birthday", "12 May 1990"),)),
    ("My sister is called Mary", (("family", "sister Mary"),)),
    ("my son's name is Tom", (("family", "son Tom"),)),
    ("My wife is Jane and she likes roses", (("family", "wife Jane"),)),
    ("I have a dog called Rex", (("family", "dog Rex"),)),
    ("My favourite colour is blue", (("like", "blue (favourite colour)"),)),
    ("remember that my car is parked on level 2", (("note", "my car is parked on level 2"),)),
    ("I like coffee now, not tea", (("like", "coffee"),)),
    ("Our anniversary is on June 5", ()),  # "our": the rules keep only "my ... is on"
    ("my anniversary is on June 5", (("date", "anniversary on June 5"),)),
    ("I'm a big fan of football", (("like", "football"),)),  # said another way: a miss
    ("Tea is my favourite drink", (("like", "tea"),)),  # a miss
    ("People know me as Dave", (("name", "Dave"),)),  # a miss
    ("what is my name", ()),
    ("what's the weather like today", ()),
    ("I'd like to hear a story", ()),
    ("would you like to play a game", ()),
    ("I'm tired", ()),
    ("I'm sorry for your loss, I've lost all of my memories", ()),  # SmolLM2's own words, said back
    ("tell me a joke", ()),
    ("do I like coffee?", ()),
    ("my name is not Bob", ()),
    ("I like it", ()),
    ("set a timer for ten minutes", ()),
    ("我叫小明，我喜欢绿茶", (("name", "小明"), ("like", "绿茶"))),
    ("我的名字是李华", (("name", "李华"),)),
    ("叫我老王就行", (("name", "老王"),)),
    ("我很喜欢爬山", (("like", "爬山"),)),
    ("我爱吃饺子", (("like", "饺子"),)),
    ("我不喜欢香菜", (("dislike", "香菜"),)),
    ("我讨厌下雨天", (("dislike", "下雨天"),)),
    ("我住在北京", (("home", "北京"),)),
    ("我家在杭州西湖边", (("home", "杭州西湖边"),)),
    ("我的生日是三月三号", (("birthday", "三月三号"),)),
    ("我是1990年5月出生的", (("birthday", "1990年5月"),)),
    ("我姐姐叫小红", (("family", "姐姐小红"),)),
    ("我儿子叫豆豆", (("family", "儿子豆豆"),)),
    ("我最喜欢的颜色是蓝色", (("like", "蓝色（最喜欢的颜色）"),)),
    ("请记住我的车停在二楼", (("note", "我的车停在二楼"),)),
    ("我现在喜欢咖啡，不喜欢茶了", (("like", "咖啡"),)),
    ("大家都叫我阿强", (("name", "阿强"),)),
    ("我叫什么名字", ()),
    ("今天天气怎么样", ()),
    ("给我讲个故事", ()),
    ("你喜欢什么", ()),
    ("我有点累了", ()),
    ("我说过我喜欢什么吗", ()),
)
