"""``benchtasks.noop`` as an oban worker (``@worker`` on a class, oban's documented form).

The job's args are ``{}`` or ``{"tag": ...}``. ``process`` is a coroutine that calls the plain
function directly, as oban's own ``@job`` wrapper does for a synchronous function.
"""

from oban import worker

import benchtasks


@worker(queue="default")
class Noop:
    async def process(self, job):
        benchtasks.noop(job.args.get("tag"))
