"""Who may see a job's arguments and result in the admin: the ``view_job_payload`` permission.

The admin attaches the request to the job it shows (:func:`attach`); the job page then asks
:func:`may_see`. Without the permission (or without a request attached: any other use of the page's
functions) a page says that there are arguments, not what they are. With it, arguments and result
are shown decrypted and redacted, and each page that shows an encrypted payload writes a
``LogEntry`` naming the user (:func:`seen`), beside the admin's actions in the job's history.
"""

from __future__ import annotations

from django.contrib.admin.models import CHANGE, LogEntry
from django.http import HttpRequest

from ..models import Job

PERMISSION = "django_taskmq.view_job_payload"
VIEWED = "Viewed its decrypted arguments and result"
_REQUEST = "_taskmq_viewer"
_LOGGED = "_taskmq_payload_logged"


def attach(request: HttpRequest, job: Job) -> Job:
    """Remember who looks at ``job`` for the page being built; return the job."""
    job.__dict__[_REQUEST] = request
    return job


def may_see(job: Job) -> bool:
    """Whether the page being built may show the job's arguments and result."""
    request = job.__dict__.get(_REQUEST)
    return request is not None and request.user.has_perm(PERMISSION)


def seen(job: Job) -> None:
    """Log, once per page, that the user saw the job's decrypted payload."""
    request = job.__dict__.get(_REQUEST)
    if request is None or job.__dict__.get(_LOGGED):
        return
    job.__dict__[_LOGGED] = True
    LogEntry.objects.log_actions(request.user.pk, [job], CHANGE, VIEWED)
