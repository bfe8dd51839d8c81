"""The operator's surface in the Django admin: jobs, the dead-letter queue, schedules, clusters,
workflows and the dashboard.

Every change goes through the broker, as from code, after a confirmation page, with the model's
permission, and leaves a ``LogEntry``. List pages never load a job's package or result, and
nothing shown is unpickled unless its signature verified. One module per page:

``jobs``          the job list and page, retry and cancel
``dead_letters``  the dead-letter list, replay (selected or a whole queue), purge
``schedules``     the checked schedule form, next runs, pause and resume
``clusters``      the heartbeats
``pauses``        the paused queues, pause and resume
``workflows``     the workflow list and page (its graph: ``workflow_graph``, its reads: ``workflow_page``)
``dashboard``     the dashboard view, installed on the admin site
``confirm``, ``forms``, ``filters``, ``display``, ``job_page``, ``chart``: their parts
"""

from __future__ import annotations

from django.contrib import admin

from ..models import Cluster, DeadLetter, Job, QueuePause, Schedule, Workflow
from .clusters import ClusterAdmin
from .dashboard import install as install_dashboard
from .dead_letters import DeadLetterAdmin
from .jobs import JobAdmin
from .pauses import QueuePauseAdmin
from .schedules import ScheduleAdmin
from .workflows import WorkflowAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(DeadLetter, DeadLetterAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(Cluster, ClusterAdmin)
admin.site.register(QueuePause, QueuePauseAdmin)
admin.site.register(Workflow, WorkflowAdmin)
install_dashboard(admin.site)

__all__ = ["ClusterAdmin", "DeadLetterAdmin", "JobAdmin", "QueuePauseAdmin", "ScheduleAdmin", "WorkflowAdmin",
           "install_dashboard"]
