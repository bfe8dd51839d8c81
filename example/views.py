from django.http import JsonResponse

from django_taskmq import async_task, fetch

from .tasks import add


def enqueue(request):
    """Enqueue an addition and return its job id."""
    a = int(request.GET.get("a", 1))
    b = int(request.GET.get("b", 2))
    return JsonResponse({"job": async_task(add, a, b)})


def status(request, job_id):
    job = fetch(job_id)
    if job is None:
        return JsonResponse({"error": "no such job"}, status=404)
    return JsonResponse({"job": job.id, "state": job.state, "result": repr(job.result)})
