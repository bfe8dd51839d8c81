"""A cache that refuses large values, as memcached does (its default item limit is 1 MiB)."""

from django.core.cache.backends.locmem import LocMemCache

ITEM_LIMIT = 1024 * 1024


class ItemLimitedCache(LocMemCache):
    def set(self, key, value, timeout=None, version=None):
        if isinstance(value, (str, bytes)) and len(value) > ITEM_LIMIT:
            raise ValueError(f"object too large for cache: {len(value)} bytes")  # pymemcache's complaint
        super().set(key, value, timeout, version)
