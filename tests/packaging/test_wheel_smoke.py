"""A new user's first hour, from the wheel: ``django-admin startproject``, the app added to the
settings Django generated (nothing else changed: Django's default SQLite settings), ``migrate``, a
job enqueued from a view through Django's test client, ``qcluster --burst``, the result read back
through another view, the admin's job list for a superuser, and ``check --deploy`` with no warning
of ours. Everything runs in a fresh virtualenv outside the repository (``conftest.py``)."""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.packaging

SHOP_TASKS = """
def add(a, b):
    return a + b
"""

SHOP_VIEWS = """
from django.http import JsonResponse

from django_taskmq import async_task, fetch


def enqueue(request):
    return JsonResponse({"job": async_task("shop.tasks.add", int(request.GET["a"]), int(request.GET["b"]))})


def status(request, job_id):
    job = fetch(job_id)
    return JsonResponse({"state": job.state, "result": job.result})
"""

URLS = """
from django.urls import path

from shop import views

urlpatterns += [path("enqueue/", views.enqueue), path("jobs/<str:job_id>/", views.status)]
"""

CLIENT = """
import json, sys
import django
django.setup()
from django.contrib.auth.models import User
from django.test import Client

client = Client(HTTP_HOST="localhost")  # DEBUG and ALLOWED_HOSTS as startproject set them
step = sys.argv[1]
if step == "enqueue":
    response = client.get("/enqueue/", {"a": 2, "b": 3})
    assert response.status_code == 200, response
    print(json.dumps(response.json()))
elif step == "status":
    print(json.dumps(client.get(f"/jobs/{sys.argv[2]}/").json()))
else:
    user = User.objects.create_superuser("admin", "admin@example.com", "a-long-test-password")
    client.force_login(user)
    page = client.get("/admin/django_taskmq/job/")
    print(page.status_code, sys.argv[2] in page.content.decode())
"""


def test_the_wheel_runs_a_new_startproject_site(wheel_venv, site):
    run = wheel_venv.run
    python = wheel_venv.python
    shop = site / "shop"
    run([python, "manage.py", "startapp", "shop"], cwd=site)
    (shop / "tasks.py").write_text(textwrap.dedent(SHOP_TASKS))
    (shop / "views.py").write_text(textwrap.dedent(SHOP_VIEWS))
    settings = site / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + '\nINSTALLED_APPS += ["django_taskmq", "shop"]\n')
    urls = site / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + URLS)
    (site / "client.py").write_text(CLIENT)
    env = {"DJANGO_SETTINGS_MODULE": "mysite.settings"}

    # Nothing of ours on Django's defaults, in check or in migrate.
    checked = run([python, "manage.py", "check"], cwd=site)
    assert "taskmq" not in checked.stdout, checked.stdout
    migrated = run([python, "manage.py", "migrate"], cwd=site)
    assert "Applying django_taskmq.0001_initial... OK" in migrated.stdout
    assert "(taskmq." not in migrated.stdout, migrated.stdout

    job = json.loads(run([python, "client.py", "enqueue"], cwd=site, **env).stdout)["job"]
    before = json.loads(run([python, "client.py", "status", job], cwd=site, **env).stdout)
    assert before == {"state": "QUEUED", "result": None}

    burst = run([python, "manage.py", "qcluster", "--burst"], cwd=site, timeout=180)
    assert "Traceback" not in burst.stdout, burst.stdout
    # No LOGGING in the site: the cluster still says what it did, once each.
    for step in ("cluster default started (", "cluster default drained queue(s) default: 1 succeeded",
                 "cluster default stopping (burst drained)", "cluster default stopped: 1 succeeded"):
        assert burst.stdout.count(step) == 1, burst.stdout
    after = json.loads(run([python, "client.py", "status", job], cwd=site, **env).stdout)
    assert after == {"state": "SUCCEEDED", "result": 5}

    admin = run([python, "client.py", "admin", job], cwd=site, **env)
    assert admin.stdout.split() == ["200", "True"]  # the job list answers and lists the job

    # --deploy warns about the site's own settings (DEBUG, SECRET_KEY, ...): none of ours.
    deploy = run([python, "manage.py", "check", "--deploy"], cwd=site, check=False)
    assert "security.W" in deploy.stdout, deploy.stdout  # the check ran
    assert "taskmq" not in deploy.stdout, deploy.stdout


def test_the_installed_package_is_the_wheel(wheel_venv, tmp_path):
    """The smoke test above runs what the wheel installed, not the repository's tree."""
    out = wheel_venv.run([wheel_venv.python, "-c", "import django_taskmq, json; "
                          "print(json.dumps([django_taskmq.__file__, django_taskmq.__version__]))"], cwd=tmp_path)
    path, version = json.loads(out.stdout)
    assert str(wheel_venv.path) in path
    assert wheel_venv.wheel.name.startswith(f"django_taskmq-{version}-")
