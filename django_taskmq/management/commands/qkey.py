"""``manage.py qkey``: print a new encryption key for ``TASKMQ['encryption_keys']``; with
``--ids``, the id of each key listed there (what a dead letter's reason names)."""

from django.core.management.base import BaseCommand, CommandError

from django_taskmq.conf import get_settings
from django_taskmq.encryption import decode_key, generate_key, key_id
from django_taskmq.exceptions import ConfigError


class Command(BaseCommand):
    help = ("Print a new key for TASKMQ['encryption_keys'] (URL-safe base64 of 32 random bytes) and, on stderr, "
            "its id; --ids lists the ids of the keys in force, the encrypting one first.")
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--ids", action="store_true", help="list the ids of the keys in TASKMQ['encryption_keys']")

    def handle(self, *args, ids=False, **options):
        if ids:
            try:
                keyring = get_settings().keyring
            except ConfigError as exc:
                raise CommandError(str(exc)) from exc
            if not keyring:
                raise CommandError("TASKMQ['encryption_keys'] is empty")
            for index, key in enumerate(keyring.ids):
                self.stdout.write(f"{key}  {'encrypts and decrypts' if index == 0 else 'decrypts'}")
            return
        key = generate_key()
        self.stdout.write(key)
        self.stderr.write(f"key id {key_id(decode_key(key))}: put the key first in TASKMQ['encryption_keys'] "
                          f"(from an environment variable), keep the old ones after it until no job needs them")
