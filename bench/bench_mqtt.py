"""MQTT + UDP against WebSocket, and idle MQTT devices held (issue #47; not a test).

    .venv/bin/python bench/bench_mqtt.py [--devices 100] [--turns 2] [--idle 10000] [--idle-seconds 60]
        [--json out.json]

Talking: one `vixio serve --workers 1` per transport (its supervisor and worker measured together, the scripted LLM of vixio/testing and
espeak TTS, no ASR: the turn is typed after the microphone audio), `--devices` simulated devices
(vixio/testing/device: the firmware's MQTT + UDP with AES-CTR, or its WebSocket) all at once,
each turn: `listen start`, one bench/capacity/load.py clip streamed at real time (60 ms Opus
frames: the capacity harness's uplink), then a typed question and the spoken answer. Per
transport: answer latency (question sent -> first audio frame, p50/p95), late frames (a
downlink frame that arrived after the device would have played it, counting from the reply's
first frame at 60 ms a frame), and the server's CPU (/proc, its process only) per frame moved
(uplink + downlink), beside the in-run floor (bench/capacity/floor.py: Opus decode + Silero VAD
of one uplink frame) and the CPU model.

Idle: `--idle` MQTT connections (raw CONNECT with credentials the server issues, then a PINGREQ
every keep-alive, 30 s, spread over the period) held on the MQTT server: RSS per idle device
(server RSS after, minus before, over the count) and the server's CPU over `--idle-seconds`
(the keep-alive traffic: minus the server's own idle CPU, measured for half as long before the
devices connect) as a share of a core and per device per keep-alive.

The host is shared (load average printed): latencies stretch on a busy machine, CPU seconds less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.floor import cpu_model, measure_floor
from capacity.load import build_clips
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve
from vixio.transports.xiaozhi.mqtt import packets as mp
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials

SECRET = "bench-mqtt-secret-0123456789abcdef"
FRAME_S = 0.060
IDLE_KEEPALIVE = 30


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def group(pgid: int) -> list[int]:
    """The server's processes: the supervisor and its worker (one process group)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry.name))
    return pids


def proc_cpu(pgid: int) -> float:
    """User + system CPU seconds of the server's processes."""
    total = 0
    for pid in group(pgid):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def proc_rss_kb(pgid: int) -> int:
    total = 0
    for pid in group(pgid):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def one_device(
    serve: ServeProcess, index: int, mqtt: bool, turns: int, clip: Any, result: dict[str, Any]
) -> None:
    device_id = f"02:00:00:47:{index // 256:02x}:{index % 256:02x}"
    kwargs: dict[str, Any] = {"ota_url": serve.ota_url} if mqtt else {"ws_url": serve.ws_url}
    async with SimulatedDevice(device_id=device_id, mqtt=mqtt, mcp=False, **kwargs) as device:
        await device.connect()
        for _ in range(turns):
            await device.start_listening("manual")
            start = time.monotonic()
            for n, packet in enumerate(clip.packets):
                await device.protocol.send_audio(packet)
                result["up"] += 1
                await asyncio.sleep(max(0.0, start + (n + 1) * FRAME_S - time.monotonic()))
            await device.stop_listening()
            mark, frames_before = device.mark(), len(device.audio_frames)
            asked = time.monotonic()
            await device.send_text("what time is it")
            await device.wait_for("tts", state="stop", after=mark, timeout=120)
            arrivals = [f.time for f in device.audio_frames[frames_before:]]
            if not arrivals:
                result["failed"] += 1
                continue
            result["latency"].append(arrivals[0] - asked)
            result["down"] += len(arrivals)
            result["late"] += sum(1 for n, at in enumerate(arrivals) if at > arrivals[0] + n * FRAME_S + 0.005)
            await device.wait_until_idle(timeout=60)


async def talking(tmp: Path, mqtt: bool, devices: int, turns: int, clips: list[Any]) -> dict[str, Any]:
    llm = ScriptedLLMServer()
    await llm.start()
    llm.expect(*[Reply.text("It is a quarter past seven in the evening.") for _ in range(devices * turns)])
    broker, udp = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_DGRAM)
    extra = (
        f"mqtt: {{enabled: {str(mqtt).lower()}, host: 127.0.0.1, port: {broker}, udp_port: {udp}, "
        f"secret: {SECRET}, keepalive: {IDLE_KEEPALIVE}, max_connections: 20000}}\n"
        f"state: {{path: {tmp / 'state.db'}}}\n"
    )
    # Every simulated device asks OTA from 127.0.0.1: no per-address share of the HTTP port.
    http = "max_connections: 2000, max_connections_per_address: 0"
    serve = await start_serve(tmp, llm, "--workers", "1", xiaozhi="max_connections: 20000", extra=extra, http=http)
    result: dict[str, Any] = {
        "transport": "mqtt+udp" if mqtt else "websocket",
        "latency": [],
        "late": 0,
        "up": 0,
        "down": 0,
        "failed": 0,
    }
    try:
        await serve.wait_ready()
        pid = serve.process.pid
        cpu0, t0 = proc_cpu(pid), time.monotonic()
        await asyncio.gather(
            *(one_device(serve, i, mqtt, turns, clips[i % len(clips)], result) for i in range(devices))
        )
        cpu, wall = proc_cpu(pid) - cpu0, time.monotonic() - t0
        frames = result["up"] + result["down"]
        result.update(
            cpu_s=round(cpu, 2),
            wall_s=round(wall, 1),
            cpu_ms_per_frame=round(1000 * cpu / max(frames, 1), 4),
            p50_ms=pct(result["latency"], 0.5),
            p95_ms=pct(result["latency"], 0.95),
            late_share=round(result["late"] / max(result["down"], 1), 4),
        )
        result.pop("latency")
        if mqtt:
            result["idle"] = await idle(serve, pid, broker)
    finally:
        await serve.stop()
        await llm.stop()
    return result


async def idle(serve: ServeProcess, pid: int, broker: int, count: int | None = None) -> dict[str, Any]:
    count = ARGS.idle if count is None else count
    issuer = MqttCredentials(SECRET)
    await asyncio.sleep(2.0)
    rss0 = proc_rss_kb(pid)
    base_cpu0, base_t0 = proc_cpu(pid), time.monotonic()  # the server's own idle CPU, without these devices
    await asyncio.sleep(ARGS.idle_seconds / 2)
    baseline = (proc_cpu(pid) - base_cpu0) / (time.monotonic() - base_t0)
    links: list[asyncio.StreamWriter] = []
    for index in range(count):
        device_id = f"06:00:{index // 65536:02x}:{index // 256 % 256:02x}:{index % 256:02x}:01"
        section = issuer.issue(device_id, f"board-{index}", "", IDLE_KEEPALIVE)
        reader, writer = await asyncio.open_connection("127.0.0.1", broker)
        body = (
            mp._pack_string("MQTT")
            + bytes([4, 0xC2])
            + IDLE_KEEPALIVE.to_bytes(2, "big")
            + mp._pack_string(str(section["client_id"]))
            + mp._pack_string(str(section["username"]))
            + mp._pack_string(str(section["password"]))
        )
        writer.write(mp.encode(mp.CONNECT, 0, body))
        assert await reader.readexactly(4) == mp.connack(mp.ACCEPTED), "the broker refused an idle device"
        links.append(writer)
    await asyncio.sleep(3.0)
    rss1 = proc_rss_kb(pid)

    async def keepalive(writer: asyncio.StreamWriter, offset: float) -> None:
        await asyncio.sleep(offset)
        while True:
            writer.write(mp.encode(mp.PINGREQ, 0, b""))
            await asyncio.sleep(IDLE_KEEPALIVE)

    pingers = [asyncio.create_task(keepalive(w, IDLE_KEEPALIVE * i / count)) for i, w in enumerate(links)]
    cpu0, t0 = proc_cpu(pid), time.monotonic()
    await asyncio.sleep(ARGS.idle_seconds)
    cpu, wall = proc_cpu(pid) - cpu0, time.monotonic() - t0
    cpu = max(0.0, cpu - baseline * wall)
    for task in pingers:
        task.cancel()
    for writer in links:
        writer.close()
    return {
        "devices": count,
        "rss_before_mb": round(rss0 / 1024, 1),
        "rss_after_mb": round(rss1 / 1024, 1),
        "kb_per_idle_device": round((rss1 - rss0) / count, 2),
        "keepalive_s": IDLE_KEEPALIVE,
        "server_idle_cpu_share_without_them": round(baseline, 4),
        "cpu_share_of_a_core": round(cpu / wall, 4),
        "cpu_us_per_device_per_keepalive": round(1e6 * cpu / count / (wall / IDLE_KEEPALIVE), 1),
    }


async def run() -> dict[str, Any]:
    clips = build_clips()
    report: dict[str, Any] = {
        "cpu": cpu_model(),
        "load_average": os.getloadavg(),
        "devices": ARGS.devices,
        "turns": ARGS.turns,
        "floor_before": measure_floor(clips),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for mqtt in (False, True):
            run_dir = Path(tmp) / ("mqtt" if mqtt else "ws")
            run_dir.mkdir()
            report["mqtt+udp" if mqtt else "websocket"] = await talking(run_dir, mqtt, ARGS.devices, ARGS.turns, clips)
    report["floor_after"] = measure_floor(clips)
    floor = statistics.mean([report["floor_before"]["ms_per_frame"], report["floor_after"]["ms_per_frame"]])
    for key in ("websocket", "mqtt+udp"):
        report[key]["cpu_per_frame_over_floor"] = round(report[key]["cpu_ms_per_frame"] / floor, 2)
    report["mqtt_over_websocket_cpu"] = round(
        report["mqtt+udp"]["cpu_ms_per_frame"] / max(report["websocket"]["cpu_ms_per_frame"], 1e-9), 2
    )
    return report


def main() -> None:
    report = asyncio.run(run())
    print(json.dumps(report, indent=2))
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(report, indent=2))


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--devices", type=int, default=100)
parser.add_argument("--turns", type=int, default=2)
parser.add_argument("--idle", type=int, default=10000)
parser.add_argument("--idle-seconds", type=float, default=60.0)
parser.add_argument("--json", default="")
ARGS = parser.parse_args()

if __name__ == "__main__":
    main()
