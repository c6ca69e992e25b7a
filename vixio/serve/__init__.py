"""How `vixio serve` runs: one supervisor process and its workers.

    supervisor.py   owns the ports, starts `--workers` worker processes, restarts a dead one,
                    stops them all on SIGTERM / Ctrl-C
    plan.py         how many workers, and the WebSocket port they share
    dispatch.py     hands each device, unread, to the worker holding the fewest
    worker.py       one worker: a VixioServer fed by dispatch, its session routes on a private socket
    peers.py        the supervisor's (and a worker's) client for the workers' private sockets
    companions.py   companion pairing when the companion and its device sit on different workers
"""
