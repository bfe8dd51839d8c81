"""The ORM broker: the Django database holds the messages.

``broker.py`` is the one engine-neutral broker; ``dialect.py`` the seam of what differs per engine,
each engine one module (``postgresql.py``, ``sqlite.py``); ``flow.py`` flow control; ``sql.py``
the SQL pieces they share; ``wakeup.py`` the waiting every engine's waker shares.
"""

from .broker import OrmBroker

__all__ = ["OrmBroker"]
