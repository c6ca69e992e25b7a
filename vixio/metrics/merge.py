"""One instance's series from its processes' own: summed, and rendered as Prometheus text.

A worker answers `GET /metrics/samples` on its private socket with `families_json()`; the
supervisor keeps each worker's latest answer in `FleetSamples` and renders the sum. Counters
(and histograms, whose buckets, sums and counts are counters) of a worker that is down or was
replaced stay in the sum at their last value, so the instance's counters never go down when a
worker restarts (Prometheus would read a drop as a reset and count the whole value again);
counts made between a worker's last scrape and its death are lost. Gauges are summed over the
workers that answered. `_created` samples (when a series started) take the earliest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from vixio.metrics.instruments import REGISTRY

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format's content type (what `generate_latest` writes)."""
PATH, JSON_PATH, SAMPLES_PATH = "/metrics", "/metrics.json", "/metrics/samples"
"""Prometheus text and the JSON view on the HTTP port; a worker's samples on its private socket."""
_CUMULATIVE = ("counter", "histogram", "summary")

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class Family:
    """One metric family: its type, help and samples by (sample name, labels)."""

    name: str
    type: str
    help: str
    samples: dict[SampleKey, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "help": self.help,
            "samples": [[name, dict(labels), value] for (name, labels), value in self.samples.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Family:
        family = cls(str(data["name"]), str(data["type"]), str(data.get("help", "")))
        for name, labels, value in data.get("samples", []):
            family.samples[(str(name), tuple(sorted((str(k), str(v)) for k, v in labels.items())))] = float(value)
        return family


def local_families(registry: CollectorRegistry = REGISTRY) -> list[Family]:
    """This process's series."""
    families = []
    for metric in registry.collect():
        family = Family(metric.name, metric.type, metric.documentation)
        for sample in metric.samples:
            family.samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        families.append(family)
    return families


def families_json(registry: CollectorRegistry = REGISTRY) -> list[dict[str, Any]]:
    return [family.to_json() for family in local_families(registry)]


def merge(groups: Iterable[Iterable[Family]], *, cumulative_only: bool = False) -> dict[str, Family]:
    """The sum of several processes' families (`cumulative_only`: counters and histograms only)."""
    merged: dict[str, Family] = {}
    for families in groups:
        for family in families:
            if cumulative_only and family.type not in _CUMULATIVE:
                continue
            into = merged.setdefault(family.name, Family(family.name, family.type, family.help))
            for key, value in family.samples.items():
                if key[0].endswith("_created"):
                    into.samples[key] = min(into.samples.get(key, value), value)
                else:
                    into.samples[key] = into.samples.get(key, 0.0) + value
    return merged


class FleetSamples:
    """The workers' latest samples, and what workers that were replaced had counted."""

    def __init__(self) -> None:
        self._latest: dict[int, tuple[int | None, list[Family]]] = {}
        """Worker index -> (its pid when it answered, its families)."""
        self._retired: list[Family] = []

    def update(self, worker: int, pid: int | None, families: list[Family]) -> None:
        """Worker `worker` (process `pid`) answered with `families`."""
        previous = self._latest.get(worker)
        if previous is not None and previous[0] != pid:  # a new process: the old one's counts are final
            self._retired = list(merge([self._retired, previous[1]], cumulative_only=True).values())
        self._latest[worker] = (pid, families)

    def families(self, answered: Iterable[int], own: list[Family], extra: Iterable[Family] = ()) -> list[Family]:
        """The instance's families: `own` (this process), every worker that `answered` now in
        full, the others' and retired workers' counters at their last value, and `extra`."""
        now = set(answered)
        groups: list[list[Family]] = [own, self._retired]
        for worker, (_, families) in self._latest.items():
            groups.append(families if worker in now else [f for f in families if f.type in _CUMULATIVE])
        merged = merge(groups)
        for family in extra:
            merged[family.name] = family
        return list(merged.values())


class _Families:
    """A prometheus_client collector that yields fixed families."""

    def __init__(self, families: Iterable[Family]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        for family in sorted(self._families, key=lambda f: f.name):
            metric = Metric(family.name, family.help, family.type)
            for (name, labels), value in family.samples.items():
                metric.add_sample(name, dict(labels), value)
            yield metric


def render(families: Iterable[Family]) -> bytes:
    """`families` in the Prometheus text format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def worker_families(ready: int, restarted: int) -> list[Family]:
    """What the supervisor knows of its workers (one process: 1 ready, never restarted)."""
    return [
        Family(
            "vixio_workers_ready",
            "gauge",
            "Worker processes serving devices now.",
            {("vixio_workers_ready", ()): float(ready)},
        ),
        Family(
            "vixio_workers_restarted",
            "counter",
            "Worker processes restarted after they exited unexpectedly.",
            {("vixio_workers_restarted_total", ()): float(restarted)},
        ),
    ]


def samples_json(registry: CollectorRegistry = REGISTRY) -> dict[str, Any]:
    """A worker's answer to `SAMPLES_PATH`."""
    return {"pid": os.getpid(), "families": families_json(registry)}
