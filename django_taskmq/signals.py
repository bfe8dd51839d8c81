"""Signals sent by django_taskmq. Sending a signal nobody listens to costs nothing."""

from django.dispatch import Signal

#: Before a job is stored by ``async_task``. Arguments: ``job`` (the unsaved :class:`~django_taskmq.models.Job`).
pre_enqueue = Signal()
#: In the worker, just before a task runs. Arguments: ``job_id``, ``func``, ``envelope``.
pre_execute = Signal()
#: In the monitor, after an outcome was recorded. Arguments: ``job_id``, ``func``, ``status``, ``result``, ``error``.
post_execute = Signal()
#: In a cluster process after it started. Arguments: ``proc_name``.
post_spawn = Signal()
#: After a job reached the dead-letter queue, on every path (failures, crash loops, bad packages,
#: rejects), once its transaction committed. Arguments: ``job_id``, ``queue``, ``reason``.
job_dead = Signal()
#: In the pusher, when a claim leaves ready jobs undelivered because of flow control. Arguments:
#: ``job_ids`` and ``reason`` ("concurrency key 'import:42' at its limit (1)", "rate limit ...").
job_held = Signal()
#: When a workflow ended (its last step ended), once that transaction committed; again after a
#: replay resumed it and it ended anew. Arguments: ``workflow_id``, ``state`` ("SUCCEEDED",
#: "FAILED" or "CANCELLED").
workflow_finished = Signal()
