"""The Xiaozhi transport's MQTT + UDP wing (docs/mqtt.md): the firmware's default transport,
which keeps an idle device reachable.

    packets.py        MQTT 3.1.1 packets, bounded
    broker.py         the embedded broker: one connection per device, delivery per connection
    credentials.py    per-device credentials OTA issues, bound to the pinned identity
    audio_packets.py  the firmware's AES-CTR UDP audio packets and their sequence rule
    udp.py            the UDP socket: each datagram to its session, or dropped and counted
    channel.py        one audio session in the shape the WebSocket transport serves
    front.py          ties them to XiaozhiTransport's sessions; the push channel
"""
