"""How `vixio serve` runs: one supervisor process and its workers.

    supervisor.py   owns the ports and the HTTP routes; starts the workers, stops them all on
                    SIGTERM / Ctrl-C
    lifecycle.py    how: spawn a worker process, wait until it answers, restart a dead one with a
                    back-off, end them all (bounded)
    dispatch.py     hands each device, unread, to the worker holding the fewest
    worker.py       one worker: a VixioServer fed by dispatch, its session routes on a private socket
    metrics_routes.py  the supervisor's /metrics from every worker

What the processes and instances of a fleet share is `vixio/fleet/` (a lower layer, so the
console and the application can use it): plan.py (how many workers, the shared port), peers.py,
directory.py, bus.py, bus_auth.py, companions.py, activation.py.
"""
