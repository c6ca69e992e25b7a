"""How `vixio serve` runs: one supervisor process and its workers.

    supervisor.py   owns the ports and the HTTP routes; starts the workers, stops them all on
                    SIGTERM / Ctrl-C
    lifecycle.py    how: spawn a worker process, wait until it answers, restart a dead one with a
                    back-off, end them all (bounded)
    plan.py         how many workers, and the WebSocket port they share
    dispatch.py     hands each device, unread, to the worker holding the fewest
    worker.py       one worker: a VixioServer fed by dispatch, its session routes on a private socket
    peers.py        the supervisor's (and a worker's) client for the workers: private sockets on one
                    machine, and through bus.py the other instances' workers
    directory.py    the live-session directory: who holds which device; one session per device
    bus.py          a fleet (`state.backend: redis`): the same calls over Redis pub/sub
    bus_auth.py     the bus's signatures (`state.fleet_secret`): no call from outside the fleet
    companions.py   companion pairing when the companion and its device sit on different workers
    fleet_activation.py  an activation code confirmed on another instance than the one that issued it
"""
