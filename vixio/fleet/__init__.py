"""What the processes and instances of one fleet share (below the console and the application).

    plan.py         how many workers `vixio serve` runs, and the WebSocket port they share
    peers.py        the client for the workers' private session routes (a worker's siblings, the
                    supervisor's workers) and the handler those routes run (`internal_call_route`)
    directory.py    the live-session directory: who holds which device; one session per device
    bus.py          a fleet (`state.backend: redis`): the same calls over Redis pub/sub
    bus_auth.py     the bus's signatures (`state.fleet_secret`): no call from outside the fleet
    companions.py   companion pairing when the companion and its device sit on different workers
    activation.py   an activation code confirmed on another instance than the one that issued it

The processes themselves (supervisor, workers, dispatch) are `vixio/serve/`.
"""
