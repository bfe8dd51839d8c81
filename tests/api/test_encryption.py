"""Encryption at rest (TASKMQ['encryption_keys'], encrypt=...): what the database holds, what a
worker gets back, and the errors of bad keys and options."""

from __future__ import annotations

import datetime
import json

import pytest
from django.utils import timezone

from django_taskmq import async_task, schedule
from django_taskmq.conf import from_mapping, get_settings
from django_taskmq.encryption import Keyring, MissingKey, Sealed, Undecryptable, generate_key, key_id, decode_key
from django_taskmq.exceptions import BadPackage, ConfigError, UnreadableResult
from django_taskmq.models import Job, Schedule
from django_taskmq.scheduler import SEALED, open_arguments, tick
from django_taskmq.envelope import seal_result, verify, verify_result

pytestmark = pytest.mark.django_db

KEY_A, KEY_B = generate_key(), generate_key()
MARKER = "marker-5f1c0e"


@pytest.fixture
def keys(settings):
    def use(*keys: str, **more):
        settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": list(keys), **more}
    use(KEY_A)
    return use


def test_a_key_encrypts_and_every_listed_key_decrypts():
    old, new = Keyring([KEY_A]), Keyring([KEY_B, KEY_A])
    sealed = old.encrypt(b"data", b"p")
    assert sealed.key == key_id(decode_key(KEY_A)) and b"data" not in sealed.token
    assert new.decrypt(sealed, b"p") == b"data"
    assert new.encrypt(b"data", b"p").key == key_id(decode_key(KEY_B))
    with pytest.raises(MissingKey, match=sealed.key):
        Keyring([KEY_B]).decrypt(sealed, b"p")
    with pytest.raises(Undecryptable):
        new.decrypt(sealed, b"another purpose")
    with pytest.raises(Undecryptable):
        new.decrypt(Sealed(sealed.key, sealed.token[:-1] + bytes([sealed.token[-1] ^ 1])), b"p")


@pytest.mark.parametrize("value, message", [
    ("abc", "must be a list of keys"),
    (["not base64!"], "entry 0: a key must be URL-safe base64"),
    (["YWJj"], "entry 0: a key must decode to 32 bytes, this one has 3"),
    ([KEY_A, KEY_A], "lists the same key twice"),
    ([1], "entry 0: a key must be a string"),
])
def test_a_bad_key_is_refused_at_start_up_naming_the_setting(value, message):
    with pytest.raises(ConfigError, match=r"TASKMQ\['encryption_keys'\] " + message) as info:
        from_mapping({"encryption_keys": value})
    assert KEY_A not in str(info.value)


def test_encrypt_all_without_keys_is_refused():
    with pytest.raises(ConfigError, match=r"TASKMQ\['encrypt_all'\] is True but TASKMQ\['encryption_keys'\] is empty"):
        from_mapping({"encrypt_all": True})


def test_encrypt_without_keys_or_with_a_bad_value_is_a_config_error_at_the_call(settings):
    with pytest.raises(ConfigError, match=r"encrypt needs TASKMQ\['encryption_keys'\]"):
        async_task("tests.tasks.echo", encrypt=True)
    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [KEY_A]}
    for bad in ("token", [], [1], ["not a name"], 3):
        with pytest.raises(ConfigError, match="encrypt must be True, False or a list of argument names"):
            async_task("tests.tasks.echo", encrypt=bad)
    assert not Job.objects.exists()


def test_encrypted_arguments_are_not_in_the_row_and_open_with_the_key(keys):
    job_id = async_task("tests.tasks.echo", MARKER, secret=MARKER, encrypt=True)
    job = Job.objects.get(pk=job_id)
    assert MARKER not in job.payload
    envelope = verify(job.payload, "tests")
    assert envelope.args == (MARKER,) and envelope.kwargs == {"secret": MARKER} and envelope.secret is None
    closed = verify(job.payload, "tests", decrypt=False)
    assert closed.args == () and closed.kwargs == {} and isinstance(closed.secret, Sealed)


def test_named_arguments_alone_are_encrypted(keys):
    job_id = async_task("tests.tasks.echo", "visible", token=MARKER, other="plain", encrypt=["token"])
    closed = verify(Job.objects.get(pk=job_id).payload, "tests", decrypt=False)
    assert closed.args == ("visible",) and closed.kwargs == {"other": "plain"}
    assert verify(Job.objects.get(pk=job_id).payload, "tests").kwargs == {"other": "plain", "token": MARKER}


def test_a_named_argument_given_by_position_is_refused(keys):
    with pytest.raises(ConfigError, match="passed by position; pass it by keyword"):
        async_task("tests.tasks.record_run", MARKER, encrypt=["tag"])
    async_task("tests.tasks.record_run", tag=MARKER, encrypt=["tag"])


def test_encrypt_all_encrypts_every_job(keys):
    keys(KEY_A, encrypt_all=True)
    job_id = async_task("tests.tasks.echo", MARKER)
    assert verify(Job.objects.get(pk=job_id).payload, "tests", decrypt=False).secret is not None


def test_a_package_whose_key_is_gone_is_a_bad_package_naming_the_key_id(keys):
    job_id = async_task("tests.tasks.echo", MARKER, encrypt=True)
    keys(KEY_B)
    with pytest.raises(BadPackage, match=f"encrypted with key id {key_id(decode_key(KEY_A))}, which "
                                         r"TASKMQ\['encryption_keys'\] does not list"):
        verify(Job.objects.get(pk=job_id).payload, "tests")


def test_an_encrypted_result_holds_no_plaintext_and_needs_its_key(keys):
    package = seal_result({"value": MARKER}, "tests", encrypt=True)
    assert MARKER.encode() not in __import__("base64").urlsafe_b64decode(package.split(":")[0] + "==")
    assert verify_result(package, "tests") == {"value": MARKER}
    assert isinstance(verify_result(package, "tests", decrypt=False), Sealed)
    keys(KEY_B)
    with pytest.raises(UnreadableResult, match="encrypted with key id"):
        verify_result(package, "tests")


def test_sync_mode_runs_an_encrypted_task_and_encrypts_its_result(keys):
    keys(KEY_A, sync=True)
    job_id = async_task("tests.tasks.echo", MARKER, encrypt=True)
    job = Job.objects.get(pk=job_id)
    assert job.state == "SUCCEEDED"
    assert job.result == ((MARKER,), {})
    assert isinstance(verify_result(job.result_package, "tests", decrypt=False), Sealed)


def test_a_schedule_stores_its_encrypted_arguments_sealed_and_its_runs_get_them(keys, broker):
    past = timezone.now() - datetime.timedelta(minutes=1)
    whole = schedule("tests.tasks.echo", MARKER, name="whole", secret=MARKER, next_run=past,
                     q_options={"encrypt": True})
    named = schedule("tests.tasks.echo", "shown", name="named", token=MARKER, other="plain", next_run=past,
                     q_options={"encrypt": ["token"]})
    stored = {s.name: (s.args, s.kwargs) for s in Schedule.objects.all()}
    assert MARKER not in json.dumps(stored)
    assert stored["whole"][0] == [] and list(stored["whole"][1]) == [SEALED]
    assert stored["named"][0] == ["shown"] and sorted(stored["named"][1]) == [SEALED, "other"]

    fired = {Job.objects.get(pk=job_id).task_name: job_id for job_id in tick()}
    runs = {name: verify(Job.objects.get(pk=job_id).payload, "tests") for name, job_id in fired.items()}
    assert (runs["whole"].args, runs["whole"].kwargs) == ((MARKER,), {"secret": MARKER})
    assert (runs["named"].args, runs["named"].kwargs) == (("shown",), {"other": "plain", "token": MARKER})
    for job_id in fired.values():  # the runs are encrypted jobs too
        assert MARKER not in Job.objects.get(pk=job_id).payload
        assert verify(Job.objects.get(pk=job_id).payload, "tests", decrypt=False).secret is not None
    assert {whole.pk, named.pk} == set(Schedule.objects.values_list("pk", flat=True))


def test_a_schedule_whose_key_is_gone_is_disabled_naming_the_key_id(keys, broker, caplog):
    schedule("tests.tasks.echo", MARKER, name="orphan", next_run=timezone.now() - datetime.timedelta(minutes=1),
             schedule_type=Schedule.MINUTES, minutes=5, q_options={"encrypt": True})
    keys(KEY_B)
    assert tick() == []
    assert Schedule.objects.get(name="orphan").repeats == 0
    assert f"encrypted with key id {key_id(decode_key(KEY_A))}" in caplog.text
    assert not Job.objects.exists()


def test_a_task_decorator_fixes_encrypt_and_a_workflow_step_takes_it(keys, broker):
    from django_taskmq import Workflow
    from tests.tasks import signs_in

    job_id = signs_in.delay("ada", token=MARKER)
    closed = verify(Job.objects.get(pk=job_id).payload, "tests", decrypt=False)
    assert closed.args == ("ada",) and closed.kwargs == {} and closed.secret is not None
    flow = Workflow(name="flow")
    flow.add("tests.tasks.echo", MARKER, name="step", q_options={"encrypt": True})
    flow.enqueue()
    step = Job.objects.get(pk=flow.job_ids["step"])
    assert MARKER not in step.payload and verify(step.payload, "tests").args == (MARKER,)


def test_qconfig_shows_key_ids_never_keys(keys):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("qconfig", stdout=out)
    assert KEY_A not in out.getvalue() and f"<key id {key_id(decode_key(KEY_A))}, not shown>" in out.getvalue()


def test_qkey_prints_a_new_key_and_lists_the_ids_in_force(keys, capsys):
    from io import StringIO

    from django.core.management import call_command

    out, err = StringIO(), StringIO()
    call_command("qkey", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert len(decode_key(key)) == 32 and f"key id {key_id(decode_key(key))}" in err.getvalue()
    keys(key, KEY_A)
    out = StringIO()
    call_command("qkey", "--ids", stdout=out)
    assert out.getvalue().split() == [key_id(decode_key(key)), "encrypts", "and", "decrypts",
                                      key_id(decode_key(KEY_A)), "decrypts"]


def test_a_keyring_pickles_as_its_keys():
    import pickle

    ring = Keyring([KEY_A])
    sealed = ring.encrypt(b"data", b"p")  # builds a cipher, which does not pickle itself
    assert pickle.loads(pickle.dumps(ring)).decrypt(sealed, b"p") == b"data"


def test_a_schedule_saved_in_the_admin_with_encrypt_stores_its_arguments_sealed(keys, admin_client, broker):
    form = {"name": "nightly", "func": "tests.tasks.echo", "args": json.dumps([MARKER]),
            "kwargs": json.dumps({"email": MARKER}), "schedule_type": "O", "repeats": -1, "next_run_0": "2030-01-01",
            "next_run_1": "00:00:00", "priority": 0, "options": '{"encrypt": true}'}
    response = admin_client.post("/admin/django_taskmq/schedule/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = Schedule.objects.get()
    assert MARKER not in json.dumps([saved.args, saved.kwargs]) and list(saved.kwargs) == [SEALED]
    # Saved again under a new first key: opened, then sealed with it.
    keys(KEY_B, KEY_A)
    response = admin_client.post(f"/admin/django_taskmq/schedule/{saved.pk}/change/",
                                 {**form, "args": json.dumps(saved.args), "kwargs": json.dumps(saved.kwargs)})
    assert response.status_code == 302, response.content.decode()[:2000]
    again = Schedule.objects.get()
    assert again.kwargs[SEALED].startswith(key_id(decode_key(KEY_B)) + ":")
    assert open_arguments(again.args, again.kwargs, get_settings()) == ([MARKER], {"email": MARKER})
