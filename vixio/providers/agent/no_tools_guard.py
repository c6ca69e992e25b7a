"""Honest answers for a model offered no tools, decided from the user's words before the model runs.

Told that it has no tools, SmolLM2-135M still answers "turn the volume up" with "I'll make sure
to turn the volume up" and "what year is it?" with "2019" although its instructions carry the
date (bench/bench_offline_truth.py). So for a model without tools:

- a request to change something on the device (volume, brightness, theme, lights, a restart...)
  is answered "I can't change that from here...", and a request to look something up (weather,
  news, a search, the time elsewhere) "I can't look that up from here...";
- a question about the time, the date, the weekday, the month or the year is answered from the
  clock (the instructions' time zone);
- anything else goes to the model, whose instructions still say what it cannot do.

The trade-off: the rules are keyword patterns per language (below) read from the user's turn. A
request worded in a way they do not list reaches the model, which may still pretend; a sentence
that matches without being a request ("tell me a story about the weather") gets the refusal
instead of the story. Nothing the model writes is rewritten, so its answers stream as before.
`agent.no_tools_guard: false` turns the rules off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vixio.providers.agent.instructions import TurnInstructions

_EN_DEVICE_THING = (
    r"volume|sound|speaker|brightness|bright|screen|display|theme|dark mode|light mode|lights?|lamp|"
    r"device|alarm|timer|music|song|wifi|wi-fi|bluetooth"
)
_EN_DEVICE_ACT = (
    r"set|turn|switch|change|make|increase|decrease|raise|lower|adjust|mute|unmute|dim|brighten|open|"
    r"close|start|stop|play|pause|enable|disable|up|down|louder|quieter|softer|brighter|darker|"
    r"on|off|max|maximum|minimum"
)


@dataclass(frozen=True, slots=True)
class GuardRules:
    """One language's patterns and answers."""

    device: re.Pattern[str]
    """A request to change something on the device."""
    lookup: re.Pattern[str]
    """A request for something only a tool or the internet knows."""
    time: re.Pattern[str]
    """A question about the time here and now."""
    date: re.Pattern[str]
    """A question about today's date, weekday, month or year."""
    elsewhere: re.Pattern[str]
    """Makes a time question one about another place (a lookup, not the clock here)."""
    cannot_act: str
    cannot_look_up: str
    time_answer: str
    """TurnInstructions clock fields, e.g. {time12}."""
    date_answer: str


RULES = {
    "en": GuardRules(
        device=re.compile(
            rf"\b({_EN_DEVICE_ACT})\b.*\b({_EN_DEVICE_THING})\b|\b({_EN_DEVICE_THING})\b.*\b({_EN_DEVICE_ACT})\b|"
            r"\b(restart|reboot|shut down|power off|factory reset|louder|quieter)\b",
            re.I,
        ),
        lookup=re.compile(
            r"\b(weather|forecast|rain|raining|rainy|snow|snowing|sunny|cloudy|windy|storm|umbrella|"
            r"temperature|degrees|humidity|news|headlines|stocks?|traffic|search|look up|google|"
            r"browse|internet|online|score|exchange rate)\b|"
            r"\b(hot|cold|warm)\b.*\b(outside|out there|today|tomorrow)\b",
            re.I,
        ),
        time=re.compile(
            r"\bwhat('s| is)?\s+(the\s+)?time\b|\b(the|current|exact)\s+time\b|\btime (is it|now)\b|"
            r"\bwhat hour\b|\bhow late is it\b|\bo'clock\b",
            re.I,
        ),
        date=re.compile(
            r"\b(date|what day|which day|day of the week|day is it|day today|day is today|what's today|"
            r"what is today|what month|which month|month is it|what year|which year|year is it|"
            r"the year)\b",
            re.I,
        ),
        elsewhere=re.compile(r"\bin\s+(?!the\s+(morning|afternoon|evening)\b)[a-z]+", re.I),
        cannot_act=(
            "Sorry, I can't change anything on the device from here: the model running me has no tools. "
            "Please use the device's buttons or settings."
        ),
        cannot_look_up="Sorry, I can't look that up: the model running me has no tools and no internet access.",
        time_answer="It's {time12}.",
        date_answer="Today is {weekday}, {day} {month_name} {year}.",
    ),
    "zh": GuardRules(
        device=re.compile(
            r"音量|声音|大声|小声|亮度|屏幕|主题|深色|浅色|灯|静音|重启|关机|闹钟|定时|音乐|蓝牙|调大|调小|调高|调低"
        ),
        lookup=re.compile(r"天气|气温|温度|下雨|下雪|刮风|新闻|股票|股价|路况|搜索|搜一下|查一下|查询|上网|比分"),
        time=re.compile(r"几点|什么时间|现在时间|时间是"),
        date=re.compile(r"几号|日期|星期几|礼拜几|周几|哪一天|几月|哪一年|哪年|今年是"),
        elsewhere=re.compile(
            r"(纽约|伦敦|东京|巴黎|悉尼|洛杉矶|莫斯科|首尔|美国|日本|英国|法国|德国|韩国|澳大利亚|国外|那边)"
        ),
        cannot_act="抱歉，我在这里不能更改设备上的任何设置：运行我的模型没有工具。请用设备上的按键或设置。",
        cannot_look_up="抱歉，我查不到这个：运行我的模型没有工具，也不能上网。",
        time_answer="现在是{time24}。",
        date_answer="今天是{year}年{month}月{day}日，{weekday}。",
    ),
}


class NoToolsGuard:
    """`guard(user_text)` is the honest answer to give instead of the model's, or None."""

    def __init__(self, rules: GuardRules, clock: TurnInstructions) -> None:
        self.rules = rules
        self.clock = clock
        """Formats the time in the instructions' zone and language."""

    def __call__(self, text: str) -> str | None:
        rules = self.rules
        asks_time = rules.time.search(text) is not None
        if asks_time and rules.elsewhere.search(text):
            return rules.cannot_look_up
        if asks_time:
            return self.clock.format_clock(rules.time_answer)
        if rules.date.search(text):
            return self.clock.format_clock(rules.date_answer)
        if rules.device.search(text):
            return rules.cannot_act
        if rules.lookup.search(text):
            return rules.cannot_look_up
        return None
