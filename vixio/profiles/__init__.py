"""Profiles at run time: which assistant each device gets, and switching a live session to another.

    book = ProfileBook(config)                      # the config's profiles and `devices:`
    choice = book.choose(device_id, assigned)       # the store's assignment wins over config
    live = SessionProfile(choice, stack, pipeline, tools, ...)   # vixio/app/profile_switch.py
    live.reassign(book.choose(device_id, "kids"))   # applied at the session's next turn

The profiles themselves are config (vixio/config/profiles.py); the run-time assignments are in the
state store (`Store.assign_profile`), set by the console (vixio/console/profiles.py) or
`vixio profile assign` (vixio/console/profiles_cli.py).
"""

from vixio.profiles.book import ProfileBook, ProfileChoice

__all__ = ["ProfileBook", "ProfileChoice"]
